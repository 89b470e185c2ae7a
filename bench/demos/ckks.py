"""``securevfl demo ckks``: one HE-VFL minibatch under CKKS, showing who holds and sends what."""

from __future__ import annotations

import argparse

import numpy as np

from protocols import ckks_he as ck
from securevfl.errors import ConfigError

NAME = "ckks"
HELP = "one HE-VFL (Taylor LR) step under CKKS: keys, messages with sizes, masked gradients"


def _kb(n: int) -> str:
    return f"{n:,} bytes"


def main(args: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="securevfl demo ckks", description=HELP)
    ap.add_argument("--rows", type=int, default=8, help="minibatch rows (default 8)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the toy data and masks")
    ap.add_argument(
        "--with-galois",
        action="store_true",
        help="also generate Galois (rotation) keys and print the size of that public context",
    )
    a = ap.parse_args(args)
    if a.rows < 1:
        raise ConfigError(f"--rows must be >= 1, got {a.rows}")
    rng = np.random.default_rng(a.seed)
    b, d0, d1 = a.rows, 2, 3
    X0, X1 = rng.uniform(-0.5, 0.5, (b, d0)), rng.uniform(-0.5, 0.5, (b, d1))
    y = rng.choice([-1.0, 1.0], size=b)
    w0, w1, bias = rng.normal(0, 0.3, d0), rng.normal(0, 0.3, d1), 0.1
    print(
        f"toy minibatch: {b} rows; party 0 (labels) has {d0} columns, party 1 has {d1}; "
        f"coordinator C = party 2\nloss: Taylor logistic log2 - y t/2 + t^2/8, residual "
        f"4 dl/dt = t - 2y (linear: one plaintext product, depth 1)\n"
    )

    sk = ck.make_secret_context()
    pub = ck.public_context_bytes(sk)
    ctx = {0: ck.load_context(pub), 1: ck.load_context(pub), 2: sk}
    print("setup (once per training):")
    print(
        f"  C generates CKKS N=8192, chain [60,40,40,60], scale 2^40; C holds keys "
        f"{ck.keys_held(sk)}"
    )
    print(
        f"  C -> party 0, party 1: public context, {_kb(len(pub))} each "
        f"(no Galois keys: with them ~35 MB)"
    )
    for k in (0, 1):
        print(f"  party {k} holds keys {ck.keys_held(ctx[k])}")
    if a.with_galois:
        g = ck.make_secret_context(galois=True)
        size = len(ck.public_context_bytes(g, galois=True))
        print(
            f"  (for comparison, a public context WITH Galois keys: {_kb(size)}; not needed here)"
        )
    try:
        ck.decrypt(ck.from_bytes(ctx[1], ck.to_bytes(ck.encrypt(ctx[1], [1.0]))))
    except ValueError as exc:
        print(f"  party 1 trying to decrypt: ValueError: {exc}")

    L = ck.PackedLayout(4096, ck.choose_rows_per_ct(4096, b, d0 + 1))
    print(
        f"\nper minibatch ({L.rows_per_ct} rows x {L.feats_per_ct} feature copies per ciphertext):"
    )
    u1 = [ck.to_bytes(c) for c in ck.encrypt_tiled(ctx[1], L, X1 @ w1)]
    print(f"  party 1 -> party 0: [[X1 w1]], {len(u1)} ciphertext(s), {_kb(sum(map(len, u1)))}")
    acc = ck.add_encrypted([[ck.from_bytes(ctx[0], x) for x in u1]])
    d_cts = ck.add_plain_tiled(acc, L, X0 @ w0 + bias - 2 * y)
    d_msg = [ck.to_bytes(c) for c in d_cts]
    print(
        f"  party 0 -> party 1: [[t - 2y]], {_kb(sum(map(len, d_msg)))} "
        f"(party 0 adds its own X0 w0 + b - 2y in the clear)"
    )
    truth = {
        0: np.hstack([X0, np.ones((b, 1))]).T @ (X0 @ w0 + X1 @ w1 + bias - 2 * y),
        1: X1.T @ (X0 @ w0 + X1 @ w1 + bias - 2 * y),
    }
    feats = {0: np.hstack([X0, np.ones((b, 1))]), 1: X1}
    for k in (0, 1):
        mine = [ck.from_bytes(ctx[k], x) for x in d_msg]
        cts, mask_sums = ck.masked_products(
            mine, L, feats[k], np.random.default_rng(a.seed + k), mask_bound=2.0**20
        )
        msg = [ck.to_bytes(c) for c in cts]
        opened = ck.reduce_blocks([ck.from_bytes(sk, x) for x in msg], L, feats[k].shape[1])
        grad = (opened - mask_sums) / (4 * b)
        print(
            f"  party {k} -> C: [[X{k}^T (t-2y) + R{k}]] (R{k} uniform in [-2^20, 2^20) per "
            f"slot, known to party {k} only), {_kb(sum(map(len, msg)))}"
        )
        seen = np.array2string(opened, precision=1)
        print(f"     C decrypts and sums the masked blocks; C sees  {seen}")
        print(f"     C -> party {k}: that masked vector, {_kb(opened.nbytes)}")
        print(f"     party {k} removes its mask: gradient {np.array2string(grad, precision=6)}")
        print(
            f"     plaintext check X{k}^T dl/dt / b:   "
            f"{np.array2string(truth[k] / (4 * b), precision=6)}"
        )
    print(
        "\nC never holds a plaintext gradient or residual; data parties never hold a residual "
        "or the other party's X w."
    )
    return 0
