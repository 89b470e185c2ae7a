"""One party of the flood tests (tests/test_hostile_flood.py), run as its own process.

``victim-preauth ADDR0 ADDR1``: party 1 of a networked run, waiting for its handshake while the
test floods it from a raw socket that claims party 0. ``victim ADDR0 ADDR1``: party 0; after
the handshake it applies a 2 MiB frame limit and waits for party 1's message while
``attacker ADDR0 ADDR1`` (party 1, authenticated) sends 128 frames of 1 MiB with labels no step
uses. A victim prints one JSON line: its error, the most bytes it held from peers
(``held_peak``), its peak RSS growth and its budgets.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys


def _peak_rss() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def main() -> None:
    role, addresses = sys.argv[1], sys.argv[2:4]
    from protocols import mpyc_net
    from securevfl.errors import PartyTimeoutError, ProtocolError
    from securevfl.runtime.networked import NetworkedRuntime

    digest = hashlib.sha256(b"flood-test").digest()
    base = _peak_rss()
    if role == "victim-preauth":
        try:
            NetworkedRuntime(1, addresses, digest=digest, timeout=6.0)
            error = ""
        except (ProtocolError, PartyTimeoutError) as exc:
            error = str(exc)
        rt_mpc = sys.modules["mpyc.runtime"].mpc
        out = {"error": error, "held_peak": getattr(rt_mpc, "_securevfl_held_peak", 0)}
        out |= {"rss_growth": _peak_rss() - base, "preauth": mpyc_net.PREAUTH_BYTES}
        print(json.dumps(out), flush=True)
        return
    rt = NetworkedRuntime(0 if role == "victim" else 1, addresses, digest=digest, timeout=30.0)
    if role == "attacker":
        rt.send(None, src=0, dst=1)  # the victim's go: it is authenticated and limited
        transport = rt.mpc.parties[0].protocol.transport
        chunk = b"\xab" * (1 << 20)

        async def flood() -> None:
            for i in range(128):
                if transport.is_closing():
                    return
                transport.write(
                    ((1 << 40) + i).to_bytes(8, "little") + len(chunk).to_bytes(4, "little")
                )
                transport.write(chunk)
                await asyncio.sleep(0)

        rt.mpc.run(flood())
        rt.mpc.run(asyncio.sleep(2.0))
        rt.close(graceful=False)
        return
    rt.limit_frames(2 << 20)
    rt.send(b"go", src=0, dst=1)
    base = _peak_rss()
    try:
        rt.send(None, src=1, dst=0)
        error = ""
    except ProtocolError as exc:
        error = str(exc)
    rt.close(graceful=False)
    peer, run = mpyc_net.held_budgets(rt.frame_limit, 2)
    out = {"error": error, "held_peak": rt.mpc._securevfl_held_peak, "peer_budget": peer}
    print(json.dumps(out | {"rss_growth": _peak_rss() - base, "run_budget": run}), flush=True)


if __name__ == "__main__":
    main()
