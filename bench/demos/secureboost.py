"""``securevfl demo secureboost``: one SecureBoost split on a toy example, with a real Paillier
key. Prints what the label holder encrypts (each row's gradient and hessian, packed in one
ciphertext), what the data party receives (ciphertexts only) and computes (per-bin products),
what the label holder decrypts (per-bin sums, optionally noised by the partner), the gains, the
request sent to the owner of the winning column, the owner's lookup record and the row
partition it returns, and the bytes of every message."""

from __future__ import annotations

import argparse

import numpy as np

from protocols import paillier_he as ph
from securevfl.errors import ConfigError, check_int
from securevfl.methods import secureboost_protocol as sp
from securevfl.models.boosted_trees import Lookup, bin_index, logistic_grad_hess

NAME = "secureboost"
HELP = "one SecureBoost split: encrypted gradients, per-bin sums, the owner's lookup (Paillier)"


def _short(ct) -> str:
    h = f"{int(ct):x}"
    return f"{h[:10]}...{h[-6:]} ({len(h) * 4} bits)"


def main(args: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="securevfl demo secureboost", description=HELP)
    ap.add_argument("--rows", type=int, default=8, help="rows n (<= 64); default 8")
    ap.add_argument("--bins", type=int, default=4, help="bins per column (>= 2); default 4")
    ap.add_argument("--bits", type=int, default=512, help="Paillier modulus bits; default 512")
    ap.add_argument("--noise", type=float, default=0.0, help="the partner's noise multiplier σ")
    ap.add_argument("--seed", type=int, default=0, help="seed of the toy data")
    a = ap.parse_args(args)
    check_int("rows", a.rows, minimum=2)
    check_int("bins", a.bins, minimum=2)
    check_int("bits", a.bits, minimum=ph.MIN_KEY_BITS)
    if a.rows > 64:
        raise ConfigError(f"rows must be <= 64 (the demo prints every row), got {a.rows}")
    if a.bits % 8 or a.bits > 4096:
        raise ConfigError(f"bits must be a multiple of 8 and <= 4096, got {a.bits}")
    if not (0 <= a.noise < 1e6):
        raise ConfigError(f"noise must be a multiplier in [0, 1e6), got {a.noise}")
    rng = np.random.default_rng(a.seed)
    n, nb = a.rows, a.bins
    x0 = np.round(rng.uniform(-1, 1, (n, 1)), 2)  # the label holder's column
    x1 = np.round(rng.uniform(-1, 1, (n, 1)), 2)  # the partner's column
    y = (x1[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(float)
    g, h = logistic_grad_hess(y, np.zeros(n))
    b0, b1 = bin_index(x0, nb, 1.0), bin_index(x1, nb, 1.0)
    print(f"party 0 (label holder): labels {y.astype(int).tolist()}, column x0 {x0.ravel()}")
    print(f"party 1 (data party): column x1 {x1.ravel()}")
    print(f"public bins: {nb} equal widths of the domain [-1, 1]; x1's bins {b1.ravel()}\n")
    pub, priv = ph.generate_keypair(a.bits)
    L = sp.Crypto(pub, priv)
    P = sp.Crypto(ph.load_public_key(ph.public_key_bytes(pub)))
    print(f"1. party 0 makes a {a.bits}-bit Paillier key; party 1 gets n only")
    print(f"   per row g = p - y, h = p(1-p) at p = 1/2, packed as g + h * 2^{sp.SLOT_BITS}")
    print(f"   (fixed point 2^-{sp.FRAC_BITS}) and encrypted: one ciphertext per row")
    cts_bytes = sp.encrypt_gradients(L, g, h)
    cts = ph.from_bytes(P.pub, cts_bytes)
    for i in range(min(n, 3)):
        print(f"   row {i}: g {g[i]:+.2f} h {h[i]:.2f} -> {_short(cts[i])}")
    print(f"   party 0 -> party 1: {len(cts_bytes)} bytes (ciphertexts only)\n")
    node_of = np.zeros(n, dtype=np.int64)
    noise = None if a.noise == 0 else (np.random.default_rng(a.seed + 1), a.noise, a.noise / 4)
    reply = sp.bin_sums(P, cts, b1, node_of, 1, nb, noise)
    what = "plus Gaussian noise, " if noise else ""
    print("2. party 1 multiplies the ciphertexts of each bin's rows (adds the sums under")
    print(f"   encryption), packs {P.capacity} bin sums per ciphertext, re-randomises ({what}a")
    print(f"   fresh encryption): party 1 -> party 0: {len(reply)} bytes\n")
    sums = sp.open_sums(L, reply, 1, 1, nb)
    print("3. party 0 decrypts per-bin sums of party 1's column (it sees these, not the rows):")
    for b in range(nb):
        print(f"   bin {b}: sum g {sums[0, 0, 0, b]:+.4f}  sum h {sums[1, 0, 0, b]:.4f}")
    node = sp.Node(0, np.arange(n), float(g.sum()), float(h.sum()))
    own = sp.own_sums(b0, g, h, node_of, 1, nb)
    (where,) = sp.choose_splits([node], {0: own, 1: sums}, lam=1.0, min_child=0.0)
    if where is None:
        print("\nno split has a positive gain on this toy data (try another --seed)")
        return 0
    k, slot, b, _ = where
    print(f"\n4. best gain (λ = 1): party {k}'s column slot {slot}, left = bins <= {b}")
    if k == 0:
        print("   a split on party 0's own column: it splits in the clear, nothing is sent")
        return 0
    lookup = Lookup()
    ans = sp.split_rows(lookup, b1, np.array([0]), node_of, np.array([[0, slot, b]]))
    left = np.unpackbits(ans["left"])[:n].astype(bool)
    print(f"   party 0 -> party 1: (node 0, slot {slot}, bin {b}); party 1 keeps record")
    print(f"   {int(ans['records'][0])} = (its column {lookup.column[0]}, bin {lookup.bin[0]},")
    print(f"   threshold x1 < {-1 + 2 * (b + 1) / nb:+.2f}) in its own lookup table")
    print(f"   party 1 -> party 0: the left rows {np.flatnonzero(left).tolist()} (the instance")
    print("   space: party 0 learns which rows fall left, and stores only (party 1, record 0))")
    return 0
