"""A hostile MPyC party for tests/test_hostile_shares.py: ``protocols.mpyc_party`` whose outgoing
shares are corrupted as ``SECUREVFL_HOSTILE`` says (run with ``-m tests._hostile_mpyc_party``).

- ``rns-nan``: its RNS shares (re-randomisation, opening) carry a NaN residue;
- ``rns-short``: its RNS shares lose their last residue;
- ``mpyc-short``: MPyC's own share messages (resharing, output) lose their last element;
- ``mpyc-float``: MPyC's own share messages are float arrays.
"""

import os
import sys

import numpy as np

from protocols import mpyc_party, shamir_rns, wire

MODE = os.environ["SECUREVFL_HOSTILE"]


def _bad_rns(exchange):
    """The RNS protocol's transport, corrupting this party's share messages (not its seeds)."""

    def send(mpc, data, senders, receivers):
        if data is not None and len(data) > 32:
            data = bytearray(data)
            if MODE == "rns-short":
                data = data[:-4]
            else:
                data[:4] = np.array([np.nan], dtype="<f4").tobytes()
            data = bytes(data)
        return exchange(mpc, data, senders, receivers)

    return send


def _guard_then_corrupt(guard):
    def install(*args, **kwargs):
        guard(*args, **kwargs)
        import mpyc.runtime as mrt

        honest = mrt.pickle.dumps

        def dumps(obj, *a, **k):
            if isinstance(obj, np.ndarray) and obj.ndim == 1 and obj.size > 1:
                obj = obj[:-1] if MODE == "mpyc-short" else obj.astype(np.float64)
            return honest(obj, *a, **k)

        mrt.pickle.dumps = dumps

    return install


if MODE.startswith("rns"):
    shamir_rns.exchange = _bad_rns(shamir_rns.exchange)
else:
    mpyc_party.guard_mpyc_unpickling = _guard_then_corrupt(wire.guard_mpyc_unpickling)

if __name__ == "__main__":
    sys.exit(mpyc_party.main())
