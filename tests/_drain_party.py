"""One party of the drain test (tests/test_networked.py), run as its own process.

``python tests/_drain_party.py K ADDR0 ADDR1``: party K of a two-party networked run. Party 0
sends party 1 a 24 MiB message and prints, as one JSON line, the bytes still in its socket's
write buffer when ``send`` returned (the runtime drains them first), then computes for a while
without the event loop, as PSI does after a broadcast; party 1 prints the seconds it waited.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time

SIZE = 24 << 20


def main() -> None:
    from securevfl.runtime.networked import NetworkedRuntime

    me, addresses = int(sys.argv[1]), sys.argv[2:4]
    rt = NetworkedRuntime(me, addresses, digest=hashlib.sha256(b"drain").digest(), timeout=60.0)
    rt.limit_frames(2 * SIZE)
    rt.send(None, src=1, dst=0)  # both past the handshake and the new limit
    t0 = time.monotonic()
    got = rt.send(b"\x5a" * SIZE if me == 0 else None, src=0, dst=1)
    if me == 0:
        left = rt.mpc.parties[1].protocol.transport.get_write_buffer_size()
        print(json.dumps({"left": left}), flush=True)
        time.sleep(2.0)  # busy elsewhere: no event loop runs to push anything still buffered
    else:
        print(json.dumps({"waited": time.monotonic() - t0, "size": len(got)}), flush=True)
    rt.send(None, src=1, dst=0)  # party 0 stays until party 1 has it all
    rt.close()


if __name__ == "__main__":
    main()
