"""The secure-product job alone, for side-by-side runs with a peer (bench/peers/spu_block.py):
[1, X_0]ᵀX_1 + N (21 x 20), 3 MPyC parties (fresh processes per run), opened to party 2.

    python -m bench.secure_products_bench --impl rns --n 10000,100000 [--reps 3]

Prints per run: exactness against the plaintext integer product, the slowest party's secure
seconds, each party's CPU seconds, seconds per phase, payload bytes per phase, peak memory.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from protocols import shamir_launch as sl
from protocols import shamir_products as sp


def run_once(n: int, impl: str, rng: np.random.Generator) -> str:
    f, bound = 16, 1e4
    X0 = np.hstack([np.ones((n, 1)), rng.uniform(-1, 1, (n, 20))])
    M = {0: sp.encode_fixed(X0, f), 1: sp.encode_fixed(rng.uniform(-1, 1, (n, 20)), f)}
    noises = {0: rng.laplace(0, 5.0, (21, 20))}
    t = time.perf_counter()
    got, st = sl.run_block_products(
        M,
        noises,
        [sp.Pair(0, 1, 0)],
        n_parties=3,
        receiver=2,
        frac_bits=f,
        noise_bound=bound,
        impl=impl,
        timeout=900,
        n_max=max(n, sp.MAX_ROWS),
    )
    wall = time.perf_counter() - t
    # |entries| <= 2**16, so the int64 product is exact for n < 2**31
    exact = bool((got[0] == M[0].T @ M[1] + sp.encode_noise(noises[0], f, bound)).all())
    phases = {k: {p: round(s, 3) for p, s in v.items()} for k, v in st.phases_s.items()}
    return (
        f"{impl} n={n} exact={exact} slowest_secure_s={max(st.secure_s.values()):.3f} "
        f"cpu_s={ {k: round(v, 3) for k, v in st.cpu_s.items()} } wall_s={wall:.2f} "
        f"phases_s={phases} phases_bytes={st.phases_bytes()} "
        f"peak_mb={ {k: round(v) for k, v in st.peak_rss_mb.items()} }"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.secure_products_bench")
    ap.add_argument("--impl", default="rns", choices=sp.IMPLS)
    ap.add_argument("--n", default="10000,100000", help="comma-separated row counts")
    ap.add_argument("--reps", type=int, default=1)
    a = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    for n in (int(v) for v in a.n.split(",")):
        for _ in range(a.reps):
            print(run_once(n, a.impl, rng), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
