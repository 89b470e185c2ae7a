"""The rns secure product streamed over row blocks (protocols/shamir_rns.py): whatever the block
size (one block, blocks that divide n, blocks that do not), the opened result is exactly the
plaintext product plus noise, the same as the unchunked run, with the same bytes on the wire."""

from __future__ import annotations

import numpy as np
import pytest

from protocols import shamir_launch as sl
from protocols import shamir_products as sp


@pytest.mark.networked
def test_streamed_product_equals_plaintext_and_unchunked_for_any_block_size():
    n, f, bound = 300, 16, 1e3
    rng = np.random.default_rng(3)
    X = {
        0: rng.uniform(-1, 1, (n, 3)),
        1: rng.uniform(-1, 1, (n, 2)),
        2: rng.uniform(-1, 1, (n, 2)),
    }
    M = {k: sp.encode_fixed(v, f) for k, v in X.items()}
    pairs = [sp.Pair(0, 1, 0), sp.Pair(0, 2, 0), sp.Pair(1, 2, 1)]
    noises = {
        j: rng.laplace(0, 5.0, (M[p.a].shape[1], M[p.b].shape[1])) for j, p in enumerate(pairs)
    }
    want = {
        j: M[p.a].astype(object).T @ M[p.b].astype(object)
        + sp.encode_noise(noises[j], f, bound).astype(object)
        for j, p in enumerate(pairs)
    }
    kw = dict(n_parties=4, receiver=3, frac_bits=f, noise_bound=bound, impl="rns", timeout=60)
    runs = {
        rows: sl.run_block_products(M, noises, pairs, block_rows=rows, **kw)
        for rows in (n, 100, 70)
    }
    for rows, (got, st) in runs.items():
        for j in want:
            assert (got[j].astype(object) == want[j]).all(), (rows, j)
            assert (got[j] == runs[n][0][j]).all()
        # parties 0, 1 and the receiver 3 are the nodes (t = 1): dealer 0 sends its seed to 3, one
        # explicit block of shares to 1 per row block, and its re-randomisation to 1 and 3
        to_1 = [nb for ph, dst, nb in st.sent[0] if ph == "input sharing" and dst == 1]
        assert len(to_1) == -(-n // rows) + 1, rows
        # the same shares cross the channel, only cut into blocks
        assert st.phases_bytes() == runs[n][1].phases_bytes(), rows
