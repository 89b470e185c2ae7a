"""``securevfl demo shamir``: FM-VFL's cross-party products on a tiny example, with real MPyC
parties. Prints each data party's encoded block, the Shamir share every MPyC party holds of each
input (a uniformly random field element, not the value), the local product shares, what is
opened and to whom (only the server, and only noisy), and the bytes each party sent to each."""

from __future__ import annotations

import argparse
import math

import numpy as np

from protocols.shamir_launch import decode_products, run_block_products
from protocols.shamir_products import (
    FIELD_PRIME,
    Pair,
    choose_frac_bits,
    encode_fixed,
)
from securevfl.errors import ConfigError, check_int

NAME = "shamir"
HELP = "Shamir shares each MPyC party holds, what is opened to whom, bytes sent (FM-VFL)"


def main(args: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="securevfl demo shamir", description=HELP)
    ap.add_argument("--rows", type=int, default=3, help="rows n; default 3")
    ap.add_argument("--parties", type=int, default=2, help="data parties K >= 2; default 2")
    ap.add_argument("--noise", type=float, default=0.5, help="Laplace scale of the demo noise")
    ap.add_argument("--seed", type=int, default=0, help="seed of the toy data and noise")
    a = ap.parse_args(args)
    check_int("rows", a.rows, minimum=1)
    if a.rows > 1000:  # a demo prints every share: keep it readable
        raise ConfigError(f"rows must be <= 1000 (the demo prints every share), got {a.rows}")
    if not (math.isfinite(a.noise) and a.noise >= 0):
        raise ConfigError(f"noise must be a finite Laplace scale >= 0, got {a.noise}")
    check_int("parties", a.parties, minimum=2)
    K, n = a.parties, a.rows
    rng = np.random.default_rng(a.seed)
    bound = 45 * a.noise
    f = min(4, choose_frac_bits(1000, bound))  # few fractional bits keep the numbers readable
    X = {k: np.round(rng.uniform(-1, 1, (n, 1)), 2) for k in range(K)}
    M = {k: encode_fixed(x, f) for k, x in X.items()}
    pairs = [Pair(a_, b, a_) for a_ in range(K) for b in range(a_ + 1, K)]
    noises = {j: np.round(rng.laplace(0, a.noise, (1, 1)), 3) for j in range(len(pairs))}
    print(
        f"K = {K} data parties + server (MPyC party {K}): m = {K + 1} parties, threshold t = "
        f"{K // 2}; field GF(p), p = {FIELD_PRIME} ({FIELD_PRIME.bit_length()} bits); "
        f"fixed point: x -> round(x * 2^{f})\n"
    )
    for k in range(K):
        print(
            f"party {k} holds x_{k} = {X[k].ravel().tolist()}  -> encoded {M[k].ravel().tolist()}"
        )
    print()
    opened, st = run_block_products(
        M,
        noises,
        pairs,
        n_parties=K + 1,
        receiver=K,
        frac_bits=f,
        noise_bound=bound,
        timeout=60,
        n_max=1000,
        trace=True,
    )
    for i in range(K + 1):
        tr = st.trace[i]
        who = "server" if i == K else f"party {i}"
        print(f"MPyC party {i} ({who}) holds shares:")
        for name in [f"M_{k}" for k in range(K)] + [f"N_{p.a}{p.b}" for p in pairs]:
            sh = tr["shares"][name]
            lab = f"x_{name[2:]}" if name.startswith("M_") else f"noise({name[2]},{name[3]})"
            print(f"  [{lab}] from party {sh['sender']}: {sh['share'].ravel().tolist()}")
        for p in pairs:
            C = tr["product_shares"][f"{p.a}{p.b}"]
            print(
                f"  local share of x_{p.a}ᵀx_{p.b} (degree 2t, resharing follows): "
                f"{C.ravel().tolist()}"
            )
    print()
    dec = decode_products(opened, f)
    for j, p in enumerate(pairs):
        exact = float((X[p.a].T @ X[p.b]).item())
        fixed = float((M[p.a].T @ M[p.b]).item()) / 4**f
        print(
            f"opened to the server ONLY: x_{p.a}ᵀx_{p.b} + noise = {dec[j].item():.4f} "
            f"(noise {noises[j].item():+.3f} shared in by party {p.noise_party}; the exact "
            f"{exact:.4f}, {fixed:.4f} in fixed point, is never opened); the data parties "
            f"receive nothing"
        )
    print("\nbytes sent (MPyC, incl. message headers):")
    for i, row in sorted(st.bytes_sent.items()):
        print(f"  party {i} -> " + ", ".join(f"{j}: {b}" for j, b in sorted(row.items())))
    return 0
