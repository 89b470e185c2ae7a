"""Start one local OS process per party and collect the label holder's record.

If any party exits with an error, the others are stopped and the error is raised naming the
party; an overall deadline bounds the whole run so nothing hangs. Each run gets a fresh run ID and
a secret key, handed to the parties over stdin: the handshake then admits only this run's own
processes, whoever else connects to the loopback ports.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import tempfile
from typing import Any

from protocols.processes import free_ports, run_group
from securevfl.errors import PartyTimeoutError, ProtocolError


def _plain_exit(line: str) -> str:
    """``exit code -9`` (what a process killed by a signal reports) as the signal's name."""
    if line.startswith("exit code -"):
        try:
            num = int(line.rsplit("-", 1)[1])
            return f"killed by signal {num} ({signal.Signals(num).name})"
        except ValueError:
            pass
    return line


def _own_spec(spec_dict: dict[str, Any], own: dict[str, Any] | None) -> dict[str, Any]:
    if not own:
        return spec_dict
    out = {**spec_dict, **{k: v for k, v in own.items() if k != "dataset_options"}}
    out["dataset_options"] = {**(spec_dict.get("dataset_options") or {})}
    out["dataset_options"].update(own.get("dataset_options") or {})
    return out


PRELOAD_ENV = "SECUREVFL_PRELOAD"


def preload_modules(method_module: str) -> tuple[str, ...]:
    """What the launcher's warm server imports once for all its party processes
    (``protocols.forked``): the party's entry module and the run's method module (torch, the
    accountant), and any modules named, comma-separated, in ``$SECUREVFL_PRELOAD`` (for a
    process that launches runs of several methods, as the test session does); ``off``: none,
    every party process a fresh interpreter."""
    raw = os.environ.get(PRELOAD_ENV, "")
    if raw.strip().lower() == "off":  # every party a fresh interpreter
        return ()
    extra = [m.strip() for m in raw.split(",") if m.strip()]
    return tuple(dict.fromkeys(["securevfl.party", *filter(None, [method_module]), *extra]))


def run_local_processes(
    spec_dict: dict[str, Any],
    n_parties: int,
    *,
    timeout: float,
    plugins: tuple[str, ...] = (),
    method_module: str = "",
    save: str | None = None,
    own: dict[int, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Run a spec with ``n_parties`` local party processes; return the label holder's record.

    ``plugins``: modules each party imports (registries); ``method_module``: the one that
    registers the spec's method, imported instead of its package's other modules. ``own[k]``:
    fields party k alone is given (its own data file), merged into its copy of the spec."""
    addresses = [f"127.0.0.1:{p}" for p in free_ports(n_parties)]
    run_id, key = secrets.token_hex(8), secrets.token_bytes(32)
    with tempfile.TemporaryDirectory(prefix="securevfl-") as tmp:
        cmds = []
        for i in range(n_parties):
            cmd = [
                sys.executable,
                "-m",
                "securevfl.party",
                "--index",
                str(i),
                "--spec-json",
                json.dumps(_own_spec(spec_dict, (own or {}).get(i))),
                "--result-file",
                os.path.join(tmp, f"party{i}.json"),
                "--plugins",
                ",".join(plugins),
                "--method-module",
                method_module,
                "--run-id",
                run_id,
                "--key-stdin",
                "--host-parties",  # they share this host's cores
                str(n_parties),
            ]
            for a in addresses:
                cmd += ["-P", a]
            if save is not None:  # each party process writes its own part
                cmd += ["--save", os.path.abspath(save)]
            cmds.append(cmd)
        run_group(
            cmds,
            [key.hex().encode() + b"\n"] * n_parties,
            timeout,
            on_failure=lambda i, line: ProtocolError(f"party {i} failed: {_plain_exit(line)}"),
            on_timeout=lambda: PartyTimeoutError(
                f"the {n_parties} party processes did not finish within {timeout:g} s"
            ),
            capture=False,
            poll_s=0.02,
            preload=preload_modules(method_module),
        )
        for i in range(n_parties):
            path = os.path.join(tmp, f"party{i}.json")
            if os.path.exists(path):
                with open(path) as f:
                    return json.loads(f.read())
    raise ProtocolError("no party produced a result record")
