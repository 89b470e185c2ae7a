"""One party of the oversize-frame test (tests/test_hostile_peers.py), run as its own process.

``victim ADDR0 ADDR1``: party 0 of a networked run; after the handshake it applies the frame
limit derived for a small vfl run and waits for party 1's message; prints one JSON line: the
error, peak RSS growth and the limit. ``attacker ADDR0 ADDR1 SIZE``: party 1;
after the handshake and the victim's go message it announces a SIZE-byte frame on its real
socket and streams 256 MiB.
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
    from securevfl.errors import ProtocolError
    from securevfl.runtime.networked import NetworkedRuntime

    digest = hashlib.sha256(b"oversize-test").digest()
    me = 0 if role == "victim" else 1
    if role == "victim":  # the limit a small vfl run derives (sizes known before the attack)
        import baselines
        from securevfl.experiment import build_views, validate_spec
        from securevfl.run_options import build_spec
        from securevfl.runtime.frame_limits import frame_limit

        baselines.load_all()
        spec = build_spec({"method": "vfl", "dataset": "breast", "seed": 0})
        method = validate_spec(spec)
        info, _, _ = build_views(spec, method, [], {})
        limit = frame_limit(spec, info, method)
    rt = NetworkedRuntime(me, addresses, digest=digest, timeout=30.0)
    if role == "attacker":
        # attack only once the victim has finished its handshake (its go message), so that the
        # abort tested is the run's derived limit, not the handshake's 1 MiB one
        rt.send(None, src=0, dst=1)
        transport = rt.mpc.parties[0].protocol.transport
        size = int(sys.argv[4])
        transport.write((1 << 40).to_bytes(8, "little") + size.to_bytes(4, "little"))
        chunk = b"\xab" * (1 << 20)

        async def stream() -> None:
            for _ in range(256):
                if transport.is_closing():
                    return
                transport.write(chunk)
                await asyncio.sleep(0)

        rt.mpc.run(stream())
        rt.mpc.run(asyncio.sleep(2.0))
        rt.close(graceful=False)
        return
    rt.limit_frames(limit)
    rt.send(b"go", src=0, dst=1)
    base = _peak_rss()
    try:
        rt.send(None, src=1, dst=0)
        error = ""
    except ProtocolError as exc:
        error = str(exc)
    rt.close(graceful=False)
    out = {"error": error, "rss_growth": _peak_rss() - base}
    print(json.dumps({**out, "limit": rt.frame_limit}), flush=True)


if __name__ == "__main__":
    main()
