"""One party of the drain test (tests/test_networked.py), run as its own process.

``python tests/_drain_party.py K ADDR0 ADDR1 SIGNAL``: party K of a two-party networked run.
Party 0 sends party 1 a 24 MiB message, then stays busy without its event loop (as PSI does
after a broadcast) until party 1 has written the file SIGNAL, which it does once it holds the
whole message: bytes left in party 0's asyncio buffer would reach party 1 only when that loop
runs again, so party 1 could not finish and party 0 would give up after 60 s. Party 0 prints,
as one JSON line, the bytes still in its socket's write buffer when ``send`` returned (the
runtime drains them first) and whether party 1 got the message while it was busy; party 1
prints the size it received.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

SIZE = 24 << 20


def main() -> None:
    from securevfl.runtime.networked import NetworkedRuntime

    me, addresses, signal = int(sys.argv[1]), sys.argv[2:4], sys.argv[4]
    rt = NetworkedRuntime(me, addresses, digest=hashlib.sha256(b"drain").digest(), timeout=60.0)
    rt.limit_frames(2 * SIZE)
    rt.send(None, src=1, dst=0)  # both past the handshake and the new limit
    got = rt.send(b"\x5a" * SIZE if me == 0 else None, src=0, dst=1)
    if me == 0:
        left = rt.mpc.parties[1].protocol.transport.get_write_buffer_size()
        # busy elsewhere: no event loop runs to push anything still buffered (60 s: a bound on
        # this wait, never a figure the test asserts)
        deadline = time.monotonic() + 60.0
        while not os.path.exists(signal) and time.monotonic() < deadline:
            time.sleep(0.05)
        done = os.path.exists(signal)
        print(json.dumps({"left": left, "received_while_busy": done}), flush=True)
    else:
        open(signal, "w").close()  # the whole message is here
        print(json.dumps({"size": len(got)}), flush=True)
    rt.send(None, src=1, dst=0)  # party 0 stays until party 1 has it all
    rt.close()


if __name__ == "__main__":
    main()
