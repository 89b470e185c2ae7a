"""SecureBoost's encrypted histograms and split protocol (SPMD), one tree at a time.

Per tree the label holder L encrypts each sampled row's (g, h) under its Paillier key, packed
in one plaintext (``g + h 2^W``, fixed point), and sends the ciphertexts with the row ids. Per
level L broadcasts each row's node; each data party k multiplies the ciphertexts per (node,
column, bin) of its own binned columns, packs ``capacity`` bin sums per ciphertext (Horner),
re-randomises each (adding its Gaussian noise there in the DP variant) and returns them. L
decrypts, adds its own columns' sums in the clear, and picks each node's best split. For a split
on k's column L sends k (node, column slot, bin); k keeps (column, bin) in its lookup table
and returns the record id and the node's rows that go left. k sends its columns in an order
of its own drawing per tree, so L learns a bin edge but not which of k's columns it cuts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gmpy2
import numpy as np

from protocols import paillier_he as ph
from protocols import paillier_pack as pk
from securevfl.errors import ProtocolError
from securevfl.methods import secureboost_sums as hs
from securevfl.models.boosted_trees import (
    Lookup,
    TreeSet,
    leaf_value,
    noise_z,
    noisy_gain_floor,
    split_gains,
)
from securevfl.runtime.expect import Expect

FRAC_BITS = 20  # fixed point of g and h (2^-20 resolution)
SLOT_BITS = 64  # one signed sum per slot: 2^63 > rows x 2^20 x C_g plus the noise's tail
PAIR_BITS = 2 * SLOT_BITS


@dataclass
class Crypto:
    """What a party holds of the key: everyone n (and the DJN base), L also the secret key."""

    pub: Any
    priv: Any = None
    fast: ph.FixedBaseEncryptor | ph.OwnerFixedBaseEncryptor | None = None

    @property
    def n(self) -> int:
        return int(self.pub.n)

    @property
    def n2(self) -> gmpy2.mpz:
        return gmpy2.mpz(self.pub.nsquare)

    @property
    def capacity(self) -> int:
        """(g, h) sums per returned ciphertext."""
        return pk.capacity(self.pub.n.bit_length(), PAIR_BITS)

    def encrypt(self, m: int) -> gmpy2.mpz:
        return self.fast.encrypt(m) if self.fast is not None else ph.raw_encrypt(self.pub, m)

    def encrypt_many(self, ms: list[int]) -> list[gmpy2.mpz]:
        """One fresh ciphertext per residue (the key holder's CRT path takes them in batches)."""
        if isinstance(self.fast, ph.OwnerFixedBaseEncryptor):
            return self.fast.encrypt_many(ms)
        return [self.encrypt(m) for m in ms]


def setup_keys(ctx: Any, bits: int, djn: bool) -> dict[int, Crypto]:
    """L makes the key pair (and encrypts by CRT: it holds p, q); n and h_s go to the others."""
    rt, L = ctx.rt, ctx.info.label_party
    others = [k for k in ctx.data_parties if k != L]
    out: dict[int, Crypto] = {}
    payload = None
    if rt.here(L):
        pub, priv = ph.generate_keypair(bits)
        h = ph.djn_base(pub) if djn else gmpy2.mpz(0)
        out[L] = Crypto(pub, priv, ph.OwnerFixedBaseEncryptor(pub, priv, h) if djn else None)
        payload = {"n": ph.public_key_bytes(pub), "h": int(h).to_bytes(bits // 4, "big")}
    with rt.meter.in_phase("setup"):
        key = Expect("public key", kind="bytes", max_len=bits // 4)
        expect = Expect("public key", kind="dict", fields=(("n", key), ("h", key)))
        got = rt.broadcast(payload, src=L, dsts=others, expect=expect)
    for k in others:
        if rt.here(k):
            pub = ph.load_public_key(got["n"])
            if pub.n.bit_length() != bits:
                raise ProtocolError(f"the public key must have {bits} bits")
            h = gmpy2.mpz(int.from_bytes(got["h"], "big"))
            out[k] = Crypto(pub, None, ph.FixedBaseEncryptor(pub, h) if djn else None)
    for k, c in out.items():  # each party's record holds its side: L's key pair, a public key
        ctx.hold_key(k, "he", c)
    return out


def plaintexts(g: np.ndarray, h: np.ndarray, n: int) -> list[int]:
    """L: each row's packed plaintext ``g + h 2^W`` (fixed point)."""
    gi = np.rint(g * 2.0**FRAC_BITS).astype(np.int64).tolist()
    hi = np.rint(h * 2.0**FRAC_BITS).astype(np.int64).tolist()
    return [pk.pack((a, b), SLOT_BITS, n) for a, b in zip(gi, hi, strict=True)]


def encrypt_gradients(c: Crypto, g: np.ndarray, h: np.ndarray, offload: Any = None) -> bytes:
    """L: one ciphertext per row of ``g + h 2^W``; ``offload``: its engine's tasks
    (``secureboost_dask.BoostOffload``, with the randomness it computed ahead), else here."""
    ms = plaintexts(g, h, c.n)
    if offload is not None:
        return offload.encrypt(ms)
    return ph.to_bytes(c.pub, c.encrypt_many(ms))


def bin_sums(
    c: Crypto,
    cts: Any,
    bins: np.ndarray,
    node_of_row: np.ndarray,
    n_nodes: int,
    n_bins: int,
    noise: tuple[np.random.Generator, float, float] | None,
    offload: Any = None,
    level: hs.LevelCells | None = None,
) -> bytes:
    """Party k: encrypted (g, h) sums per (node, column, bin), packed and re-randomised.

    ``cts``: the ciphertexts (with ``offload``, its handle of them on the engine); ``bins``:
    the sampled rows' bins of k's columns in the order it sends them; ``noise``: (its CSPRNG,
    sigma C_g, sigma C_h) in the DP variant, else None; ``offload``: the party's engine
    (``secureboost_dask.BoostOffload``) that multiplies and packs, else here; ``level``: the
    party's cells of this tree's level before (``hs.LevelCells``, updated here): each parent's
    fullest child then comes by division (histogram subtraction), the same products."""
    cap, F = c.capacity, bins.shape[1]
    if offload is not None:
        compute = lambda m: offload.products(cts, bins, m, n_nodes, n_bins)  # noqa: E731
    else:
        compute = lambda m: hs.products(c.n2, cts, bins, m, n_nodes, n_bins)  # noqa: E731
    acc = hs.level_products(c.n2, node_of_row, n_nodes, F, n_bins, level, compute)
    if offload is not None:
        packed = offload.pack(acc, cap)
    else:
        packed = hs.pack_cells(c.n2, acc, cap, PAIR_BITS)
    cells = n_nodes * F * n_bins
    out = []
    for j, ct in enumerate(packed):
        pairs = min(cap, cells - j * cap)
        slots = [0] * (2 * pairs) if noise is None else noise_slots(noise, pairs)
        # fresh randomness on every reply (and the noise, under encryption, where there is one)
        out.append(ct * c.encrypt(pk.pack(list(slots), SLOT_BITS, c.n)) % c.n2)
    return ph.to_bytes(c.pub, out)


def noise_slots(noise: tuple[np.random.Generator, float, float], pairs: int) -> np.ndarray:
    """The DP variant's fixed-point noise of ``pairs`` (g, h) sums, interleaved g, h, g, h, ...:
    N(0, (sigma C_g)^2) and N(0, (sigma C_h)^2) at 2^-FRAC_BITS resolution (``noise`` is (the
    party's CSPRNG, sigma C_g, sigma C_h)). ``bin_sums`` adds them under encryption; the
    release audit (``securevfl.audit.boost_release``) draws them here too."""
    rng, sg, sh = noise
    scale = np.tile([sg, sh], pairs) * 2.0**FRAC_BITS
    return np.rint(rng.normal(0.0, 1.0, size=2 * pairs) * scale).astype(np.int64)


def open_sums(c: Crypto, data: bytes, n_nodes: int, F: int, n_bins: int) -> np.ndarray:
    """L: decrypt a party's reply into (2, nodes, columns, bins) sums of g and h."""
    cts = ph.from_bytes(c.pub, data)
    total, cap = n_nodes * F * n_bins, c.capacity
    if len(cts) != -(-total // cap):
        raise ProtocolError(f"a bin-sum reply must hold {-(-total // cap)} ciphertexts")
    flat: list[int] = []
    for ct in cts:
        flat += pk.unpack(c.priv.raw_decrypt(int(ct)), 2 * cap, SLOT_BITS, c.n)
    arr = np.asarray(flat[: 2 * total], dtype=np.float64) / 2.0**FRAC_BITS
    return arr.reshape(n_nodes, F, n_bins, 2).transpose(3, 0, 1, 2)


@dataclass
class Node:
    """An open node at L: its index in the skeleton and its rows (positions in the sample)."""

    index: int
    rows: np.ndarray
    G: float = 0.0
    H: float = 0.0


def choose_splits(
    nodes: list[Node],
    sums: dict[int, np.ndarray],
    lam: float,
    min_child: float,
    noise_sd: dict[int, tuple[float, float]] | None = None,
) -> list[tuple[int, int, int, int] | None]:
    """Per node: (party, column slot, bin, node) of the best positive-gain split, or None.

    ``sums[k]``: (2, nodes, columns, bins) of party k (L's own in the clear, others decrypted);
    ``noise_sd[k]``: the sd of the noise on each of k's (g, h) bin sums (DP). A noisy party's
    candidate competes with its least gain consistent with the noise
    (``boosted_trees.noisy_gain_floor``, z from the node's count of noisy candidates): it wins
    only where that beats every exact gain, and a node whose best floor is not positive gets
    no noisy split. Ties go to the lower party."""
    noisy = noise_sd or {}
    m = sum(sums[k].shape[2] * (sums[k].shape[3] - 1) for k in noisy if k in sums)
    z = noise_z(m)
    out: list[tuple[int, int, int, int] | None] = []
    for v, node in enumerate(nodes):
        best, where = 0.0, None
        for k in sorted(sums):
            g_sums, h_sums = sums[k][0, v], sums[k][1, v]
            if k in noisy:
                gain = noisy_gain_floor(node.G, node.H, g_sums, h_sums, lam, min_child, noisy[k], z)
            else:
                gain = split_gains(node.G, node.H, g_sums, h_sums, lam, min_child)
            if gain.size and np.max(gain) > best:
                best = float(np.max(gain))
                slot, b = np.unravel_index(int(np.argmax(gain)), gain.shape)
                where = (k, int(slot), int(b), v)
        out.append(where)
    return out


def own_sums(
    bins: np.ndarray, g: np.ndarray, h: np.ndarray, node_of_row: np.ndarray, n_nodes: int, nb: int
) -> np.ndarray:
    """L's (2, nodes, columns, bins) sums of its own binned columns, in the clear."""
    F = bins.shape[1]
    live = node_of_row >= 0
    keys = (node_of_row[live, None].astype(np.int64) * F + np.arange(F)) * nb + bins[live]
    size = n_nodes * F * nb
    sg = np.bincount(keys.ravel(), weights=np.repeat(g[live], F), minlength=size)
    sh = np.bincount(keys.ravel(), weights=np.repeat(h[live], F), minlength=size)
    return np.stack([sg, sh]).reshape(2, n_nodes, F, nb)


def split_rows(
    lookup: Lookup, bins: np.ndarray, columns: np.ndarray, node_of_row: np.ndarray, req: np.ndarray
) -> dict[str, Any]:
    """Owner k: for each requested (node, slot, bin), a lookup record and the node's rows (in
    sample order) that go left, bit-packed."""
    records, masks = [], []
    for v, slot, b in np.asarray(req, dtype=np.int64).reshape(-1, 3).tolist():
        if not 0 <= slot < len(columns):
            raise ProtocolError(f"a split request names column slot {slot} of {len(columns)}")
        col = int(columns[slot])
        rows = np.nonzero(node_of_row == v)[0]
        records.append(lookup.add(col, b))
        masks.append(np.packbits(bins[rows, col] <= b))
    flat = np.concatenate(masks) if masks else np.zeros(0, dtype=np.uint8)
    return {"records": np.asarray(records, dtype=np.int64), "left": flat}


def apply_splits(
    trees: TreeSet,
    nodes: list[Node],
    chosen: list[tuple[int, int, int, int] | None],
    lefts: dict[int, list[np.ndarray]],
    records: dict[int, list[int]],
    own: tuple[Lookup, np.ndarray, np.ndarray],
    g: np.ndarray,
    h: np.ndarray,
    lr: float,
    lam: float,
) -> list[Node]:
    """L: grow the chosen splits into children (left masks from their owners or its own
    columns), make every unsplit node a leaf; the next level's open nodes."""
    lookup, bins, columns = own
    nxt, seen = [], {k: 0 for k in lefts}
    for node, where in zip(nodes, chosen, strict=True):
        if where is None:
            trees.value[node.index] = lr * leaf_value(node.G, node.H, lam)
            continue
        k, slot, b, _ = where
        if k in lefts:
            i = seen[k]
            seen[k] += 1
            left, rec = lefts[k][i], records[k][i]
        else:  # L's own column: split in the clear
            col = int(columns[slot])
            left, rec = bins[node.rows, col] <= b, lookup.add(col, b)
        trees.owner[node.index], trees.record[node.index] = k, rec
        for side, rows in ((trees.left, node.rows[left]), (trees.right, node.rows[~left])):
            child = trees.new_node()
            side[node.index] = child
            nxt.append(Node(child, rows, float(g[rows].sum()), float(h[rows].sum())))
    return nxt
