"""Issue 45's acceptance sweep: substitute every kind of message at every step and count outcomes.

For each method below, an honest in-process run on breast first lists the message kinds it
delivers: a step name where the receiver declares an ``Expect``, else the protocol function
that sends it (an unchecked message). Then for each kind and each forgery (a string, a list,
ints, a float array of the wrong shape, NaN, infinity, junk bytes, None, a dict) a fresh run
has the sender substitute its first message of that kind (round-tripped through the wire, as a
peer would send it). Outcomes:

- ``named``: a ProtocolError/ConfigError/DataError naming the peer (one line);
- ``error``: any other exception (what a user would see as a traceback);
- ``silent``: the run finished with the forged message in it (a silent wrong result);
- ``hang``: the run did not finish within ``--limit`` seconds.

Usage: ``python tools/hostile_sweep.py [--methods vfl-glm,czofo-vfl] [--limit 120] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import baselines  # noqa: E402, F401  (registers the baselines)
from protocols import wire  # noqa: E402
from securevfl.context import RunSpec  # noqa: E402
from securevfl.errors import ConfigError, DataError, ProtocolError  # noqa: E402
from securevfl.experiment import run_experiment  # noqa: E402
from securevfl.runtime import InProcessRuntime  # noqa: E402

MLP = {"model": "mlp", "epochs": 1, "batch_size": 64}
METHODS: dict[str, tuple[dict[str, Any], int]] = {  # name -> (spec fields, runtime parties)
    "vfl-glm": ({"method": "vfl", "model": "glm", "epochs": 1, "batch_size": 64}, 2),
    "vfl-mlp": ({"method": "vfl", **MLP}, 2),
    "vfl-mlp-concat": ({"method": "vfl", **MLP, "aggregation": "concat"}, 2),
    "czofo-vfl": ({"method": "czofo-vfl", **MLP, "options": {"q": 2, "curve_points": 0}}, 3),
    "compressed-vfl": ({"method": "compressed-vfl", **MLP, "options": {"curve_points": 0}}, 3),
    "zoo-vfl": ({"method": "zoo-vfl", **MLP, "options": {"q": 2, "curve_points": 0}}, 3),
    "afe-vfl": ({"method": "afe-vfl", **MLP, "epsilon": 4.0, "options": {"variant": "full"}}, 3),
    "afe-vfl-once": (
        {
            "method": "afe-vfl",
            **MLP,
            "epsilon": 4.0,
            "options": {"release_schedule": "release-once", "active_features": True},
        },
        2,
    ),
    "secureboost": (
        {
            "method": "secureboost",
            "model": "gbdt",
            "options": {"trees": 2, "depth": 2, "paillier_bits": 512},
        },
        2,
    ),
    "hdp-vfl": ({"method": "hdp-vfl", "model": "glm", "epochs": 1, "epsilon": 4.0}, 2),
    "ldp-vfl": ({"method": "ldp-vfl", **MLP, "epsilon": 4.0}, 3),
    "pbm-vfl": ({"method": "pbm-vfl", **MLP}, 3),
    "he-vfl": ({"method": "he-vfl", "model": "glm", "epochs": 1, "batch_size": 64}, 3),
    "fm-vfl": ({"method": "fm-vfl", "model": "glm", "epsilon": 4.0}, 3),
}

FORGERIES: dict[str, Any] = {
    "str": "hello",
    "list": [1.0, 2.0],
    "ints": np.arange(4),
    "shape": np.zeros((3, 3)),
    "nan": None,  # the honest value with a NaN, where it is a float array; else a NaN array
    "inf": None,
    "bytes": b"\x01\x02junk",
    "none": None,
    "dict": {"x": 1},
}


def _forge(kind: str, honest: Any) -> Any:
    if kind in ("nan", "inf"):
        bad = np.nan if kind == "nan" else np.inf
        if isinstance(honest, np.ndarray) and honest.dtype.kind == "f" and honest.size:
            out = honest.copy()
            out.flat[0] = bad
            return out
        return np.full(4, bad)
    return FORGERIES[kind]


def _kind(expect: Any, src: int) -> str:
    rule = expect.get(src) if isinstance(expect, dict) else expect
    if rule is not None:
        return rule.step
    for frame in traceback.extract_stack()[::-1]:  # the protocol function that sent it
        path = frame.filename
        if "/runtime/" in path or path.endswith("hostile_sweep.py"):
            continue
        return f"unchecked: {Path(path).name}:{frame.name}"
    return "unchecked"


class Sweep(InProcessRuntime):
    """Lists message kinds (``target`` None) or substitutes the first of ``target``."""

    def __init__(self, n: int, target: tuple[str, int] | None = None, forgery: str = "") -> None:
        super().__init__(n)
        self.kinds: dict[tuple[str, int], int] = {}
        self.target, self.forgery, self.done = target, forgery, False

    def _delivered(self, value, *, src, dst, expect=None):
        kind = (_kind(expect, src), src)
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if kind == self.target and not self.done:
            self.done = True
            value = wire.loads(wire.dumps(_forge(self.forgery, value)))
        return super()._delivered(value, src=src, dst=dst, expect=expect)


def _spec(fields: dict[str, Any], n: int) -> RunSpec:
    server = ("czofo-vfl", "compressed-vfl", "zoo-vfl", "ldp-vfl", "pbm-vfl", "he-vfl", "fm-vfl")
    parties = n - 1 if fields.get("method") in server else n
    if fields.get("method") == "afe-vfl" and "variant" in fields.get("options", {}):
        parties = n - 1
    return RunSpec(dataset="breast", parties=parties, seed=0, **fields)


def _alarm(*_: Any) -> None:
    raise TimeoutError


def run_case(fields: dict[str, Any], n: int, target, forgery: str, limit: float) -> str:
    rt = Sweep(n, target, forgery)
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(limit))
    try:
        run_experiment(_spec(fields, n), rt)
        return "silent" if rt.done else "not reached"
    except TimeoutError:
        return "hang"
    except (ProtocolError, ConfigError, DataError) as e:
        one = "\n" not in str(e)
        named = one and re.search(r"\bpart(y|ies)\b", str(e))
        return "named" if named else f"error: unnamed {type(e).__name__}"
    except Exception as e:  # noqa: BLE001  (what the sweep counts)
        return f"error: {type(e).__name__}: {str(e)[:120]}"
    finally:
        signal.alarm(0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--limit", type=float, default=120.0, help="seconds before a case is a hang")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    totals: Counter = Counter()
    rows = []
    for name in args.methods.split(","):
        fields, n = METHODS[name]
        honest = Sweep(n)
        run_experiment(_spec(fields, n), honest)
        for target in sorted(honest.kinds):
            for forgery in FORGERIES:
                out = run_case(fields, n, target, forgery, args.limit)
                bucket = out.split(":")[0]
                totals[bucket] += 1
                rows.append(
                    {"method": name, "step": target[0], "sender": target[1], "forgery": forgery,
                     "outcome": out}
                )  # fmt: skip
                if bucket != "named":
                    print(f"{name} {target} {forgery}: {out}", file=sys.stderr, flush=True)
        print(f"{name}: {dict(totals)}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows))
    print(json.dumps(dict(totals)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
