"""Paillier helpers on python-paillier (``phe``) with gmpy2 arithmetic: the FATE/Hardy-style twin.

Values are fixed-point integers modulo n (``round(v * 2**frac_bits)``, negatives as ``n - |m|``).
A ciphertext is ``(1 + m n) r^n mod n^2`` (g = n + 1); adding plaintexts multiplies ciphertexts,
multiplying by a plaintext integer ``k`` raises to ``k`` (a negative ``k`` uses the inverse
ciphertext, so exponents stay short). Ciphertexts travel as fixed-width big-endian bytes.

This module knows nothing of models or datasets; errors are :class:`PaillierParameterError`.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import gmpy2
import numpy as np
from phe import paillier

from protocols.prime_square_powers import PrimeSquarePowers

MIN_KEY_BITS = 256  # VFLAIR's benchmark setting; 2048 is the default and the secure choice


class PaillierParameterError(ValueError):
    """Malformed Paillier parameters or operands."""


def generate_keypair(
    n_bits: int = 2048,
) -> tuple[paillier.PaillierPublicKey, paillier.PaillierPrivateKey]:
    """A fresh key pair (OS entropy); ``n_bits`` >= 256 and a multiple of 8."""
    if not isinstance(n_bits, int) or n_bits < MIN_KEY_BITS or n_bits % 8:
        raise PaillierParameterError(
            f"n_bits must be an integer >= {MIN_KEY_BITS} and a multiple of 8, got {n_bits!r}"
        )
    return paillier.generate_paillier_keypair(n_length=n_bits)


def ct_width(pub: paillier.PaillierPublicKey) -> int:
    """Bytes of one serialized ciphertext (an integer below n^2)."""
    return (pub.nsquare.bit_length() + 7) // 8


def public_key_bytes(pub: paillier.PaillierPublicKey) -> bytes:
    """The public key as bytes (n only: g = n + 1)."""
    n = int(pub.n)
    return n.to_bytes((n.bit_length() + 7) // 8, "big")


def load_public_key(data: bytes, n_bits: int | None = None) -> paillier.PaillierPublicKey:
    """The key of :func:`public_key_bytes`; ``n_bits``: the length n must have (a peer's key)."""
    n = int.from_bytes(data, "big")
    if n_bits is not None and (n.bit_length() != n_bits or n % 2 == 0):
        raise PaillierParameterError(
            f"a public key n must be odd and of {n_bits} bits, got {n.bit_length()} bits"
        )
    return paillier.PaillierPublicKey(n)


def encode(pub: paillier.PaillierPublicKey, values: np.ndarray, frac_bits: int) -> list[int]:
    """Fixed-point encode reals to integers modulo n."""
    n = pub.n
    scaled = np.rint(np.asarray(values, dtype=np.float64).ravel() * 2.0**frac_bits)
    if not np.all(np.isfinite(scaled)) or np.any(np.abs(scaled) >= 2.0**62):
        raise PaillierParameterError(
            f"values * 2^{frac_bits} must be finite and < 2^62 in magnitude"
        )
    return [int(v) % n for v in scaled.astype(np.int64)]


def decode(pub: paillier.PaillierPublicKey, ints: Sequence[int], frac_bits: int) -> np.ndarray:
    """Signed fixed-point decode: residues above n/2 are negative."""
    n, half = int(pub.n), int(pub.n) // 2
    return np.array([(int(m) - n if int(m) > half else int(m)) / 2.0**frac_bits for m in ints])


def raw_encrypt(pub: paillier.PaillierPublicKey, m: int) -> gmpy2.mpz:
    """Encrypt one residue m < n with fresh randomness r (the expensive r^n mod n^2)."""
    n, n2 = gmpy2.mpz(pub.n), gmpy2.mpz(pub.nsquare)
    r = gmpy2.mpz(secrets.randbelow(int(n) - 1) + 1)
    return (1 + gmpy2.mpz(m) * n) % n2 * gmpy2.powmod(r, n, n2) % n2


def encrypt_vector(
    pub: paillier.PaillierPublicKey,
    values: np.ndarray,
    frac_bits: int,
    fast: FixedBaseEncryptor | None = None,
) -> list[gmpy2.mpz]:
    """Encrypt each entry of ``values`` (one ciphertext per value, as FATE does); with ``fast``,
    by its short-exponent fixed-base randomness instead of a fresh r^n."""
    enc = fast.encrypt if fast is not None else (lambda m: raw_encrypt(pub, m))
    return [enc(m) for m in encode(pub, values, frac_bits)]


def djn_base(pub: paillier.PaillierPublicKey) -> gmpy2.mpz:
    """Key holder: h_s = (-x^2)^n mod n^2 for a random x (Damgard-Jurik-Nielsen's fast variant).

    Ciphertexts then take their randomness as h_s^a with a of n_bits/2 random bits: h_s^a is an
    n-th power like r^n, drawn from a subgroup too large to search (the DJN short-exponent
    assumption, a stronger one than textbook Paillier's DCR alone).
    """
    n, n2 = gmpy2.mpz(pub.n), gmpy2.mpz(pub.nsquare)
    x = gmpy2.mpz(secrets.randbelow(int(n) - 2) + 2)
    return gmpy2.powmod((-x * x) % n, n, n2)


class FixedBaseEncryptor:
    """Encryption with randomness h_s^a from a fixed-base table (built once per data party).

    ``table[k][d] = h_s^(d * 2^(window k)) mod n^2``: an encryption costs one product per
    window of the exponent (128 for 2048-bit n at window 8) instead of a 2048-bit powmod
    (~1,500 products): the precomputation lever (16 MiB of table at 2048 bits).
    """

    def __init__(self, pub: paillier.PaillierPublicKey, h_s: gmpy2.mpz, window: int = 8) -> None:
        self.pub, self.window = pub, window
        self.n, self.n2 = gmpy2.mpz(pub.n), gmpy2.mpz(pub.nsquare)
        self.exp_bits = -(-int(pub.n).bit_length() // 2)
        self.table = _power_table(h_s, self.exp_bits, window, self.n2)

    def encrypt(self, m: int) -> gmpy2.mpz:
        return self._encrypt_with(m, secrets.randbits(self.exp_bits))

    def _encrypt_with(self, m: int, a: int) -> gmpy2.mpz:
        """The ciphertext of m with randomness h_s^a (``a`` given: tests compare paths)."""
        return with_randomness(self.n, m, _table_power(self.table, a, self.window, self.n2))


def _power_table(base: gmpy2.mpz, exp_bits: int, window: int, mod: gmpy2.mpz) -> list[list]:
    """``table[k][d] = base^(d * 2^(window k)) mod mod`` for the windows of an exp_bits exponent."""
    table: list[list[gmpy2.mpz]] = []
    base = gmpy2.mpz(base) % mod
    for _ in range(-(-exp_bits // window)):
        row = [gmpy2.mpz(1), base]
        for _ in range((1 << window) - 2):
            row.append(row[-1] * base % mod)
        table.append(row)
        base = row[-1] * base % mod  # base^(2^(window (k+1)))
    return table


def _table_power(table: list[list], a: int, window: int, mod: gmpy2.mpz) -> gmpy2.mpz:
    """base^a mod mod from a :func:`_power_table`: one product per non-zero window of a."""
    mask, r = (1 << window) - 1, gmpy2.mpz(1)
    for row in table:
        d = a & mask
        if d:
            r = r * row[d] % mod
        a >>= window
    return r


OWNER_WINDOW = 12  # the key holder's fixed-base window (bits of exponent per table product)
BATCH = 1024  # exponents per row-major pass of ``randomness_many`` (their products stay cached)


class OwnerFixedBaseEncryptor:
    """The key holder's DJN encryption: the same ciphertexts as :class:`FixedBaseEncryptor`,
    computed modulo p^2 and q^2 (it knows p and q) and joined by the Chinese remainder theorem.

    Why it is the same number: n^2 = p^2 q^2 with gcd(p^2, q^2) = 1, so Z_{n^2} is isomorphic to
    Z_{p^2} x Z_{q^2} (x -> (x mod p^2, x mod q^2)), and the map respects products and powers:
    c mod p^2 = ((1 + m n) mod p^2) (h_s mod p^2)^a mod p^2, likewise mod q^2. Garner's step
    r = r_q + q^2 ((r_p - r_q) (q^2)^-1 mod p^2) joins the randomness h_s^a computed per prime
    square into the unique residue below n^2 with those two images, and the ciphertext is then
    ``(1 + m n) r mod n^2``: exactly ``(1 + m n) h_s^a mod n^2`` for the same exponent a. Nothing
    changes on the wire or in security (the exponent is drawn as before, n_bits/2 random bits),
    only the cost. Each table product is on a modulus of n_bits (p^2) instead of 2 n_bits
    (n^2): 2.5x cheaper in gmpy2 (3.2 against 8.0 us at 2048 bits), done twice. Only the key
    holder can do it; data parties keep the public-key path.

    Tables (``prime_square_powers.PrimeSquarePowers``): one per prime square,
    ``ceil(n_bits / 2 / window)`` rows of ``2^window`` residues modulo the prime (n_bits / 2
    bits: half the size of residues modulo its square, which a DJN base allows; the derivation
    in that module) and their Fermat quotients. At 2048 bits and window 12 (the default): 86
    products per prime square and value, each of a residue mod p^2 by one below p; the two
    tables took 308 MiB of the process (measured RSS; 221 MiB for the earlier tables of
    residues mod p^2) and 2.9-3.7 CPU-s to build (2.1-2.2). :meth:`randomness_many` takes the
    products table row by table row over a batch of exponents, so each row is read from the
    cache once per batch instead of once per value: 0.40 CPU ms per value against 0.60 with
    the earlier tables (median of 10 rounds of 1,024 exponents alternating the two in one
    process; docs/benchmarks.md "SecureBoost").
    """

    def __init__(
        self,
        pub: paillier.PaillierPublicKey,
        priv: paillier.PaillierPrivateKey,
        h_s: gmpy2.mpz,
        window: int = OWNER_WINDOW,
    ) -> None:
        if int(priv.p) * int(priv.q) != int(pub.n):
            raise PaillierParameterError("the private key's p q must equal the public key's n")
        self.pub, self.window, self.h_s = pub, window, gmpy2.mpz(h_s)
        self.n = gmpy2.mpz(pub.n)
        self.p, self.q = gmpy2.mpz(priv.p), gmpy2.mpz(priv.q)
        self.p2, self.q2 = self.p**2, self.q**2
        self.q2_inv = gmpy2.invert(self.q2, self.p2)  # Garner's constant
        self.exp_bits = -(-int(pub.n).bit_length() // 2)
        for prime in (self.p, self.q):  # what the tables rely on (a DJN base always has it)
            if gmpy2.powmod(self.h_s, prime - 1, prime**2) != 1:
                raise PaillierParameterError("h_s must be an n-th power modulo n^2 (djn_base)")
        self._tables: tuple[PrimeSquarePowers, PrimeSquarePowers] | None = None  # on first use

    @property
    def tables(self) -> tuple[PrimeSquarePowers, PrimeSquarePowers]:
        """The fixed-base tables modulo p^2 and q^2, built on first use (a key holder whose
        encryption runs on its engine's workers never builds them in its own process)."""
        if self._tables is None:
            self._tables = (
                PrimeSquarePowers(self.h_s, self.p, self.exp_bits, self.window),
                PrimeSquarePowers(self.h_s, self.q, self.exp_bits, self.window),
            )
        return self._tables

    def encrypt(self, m: int) -> gmpy2.mpz:
        return self._encrypt_with(m, secrets.randbits(self.exp_bits))

    def _encrypt_with(self, m: int, a: int) -> gmpy2.mpz:
        """The ciphertext of m with randomness h_s^a (``a`` given: tests compare paths)."""
        return with_randomness(self.n, m, self.randomness(a))

    def randomness(self, a: int) -> gmpy2.mpz:
        """h_s^a mod n^2 (the whole cost of an encryption; it does not depend on m, so it can
        be computed ahead: ``with_randomness`` then costs one product)."""
        return self.randomness_many([a])[0]

    def randomness_many(self, exponents: Sequence[int]) -> list[gmpy2.mpz]:
        """h_s^a mod n^2 for each exponent a (0 <= a < 2^exp_bits): the same numbers as one
        :meth:`randomness` each, the products taken row by row of the tables over ``BATCH``
        exponents at a time (a row, 1 MiB at window 12, is then read from the cache)."""
        out: list[gmpy2.mpz] = []
        table_p, table_q = self.tables
        for i in range(0, len(exponents), BATCH):
            digits = window_digits(exponents[i : i + BATCH], self.exp_bits, self.window)
            r_p, r_q = table_p.powers(digits), table_q.powers(digits)
            p2, q2, q2_inv = self.p2, self.q2, self.q2_inv  # Garner's join of the two images
            out += [rq + q2 * ((rp - rq) * q2_inv % p2) for rp, rq in zip(r_p, r_q, strict=True)]
        return out

    def encrypt_many(self, ms: Sequence[int]) -> list[gmpy2.mpz]:
        """One ciphertext per residue of ``ms``, each with a fresh exponent from the OS CSPRNG."""
        rand = self.randomness_many([secrets.randbits(self.exp_bits) for _ in ms])
        return [with_randomness(self.n, m, r) for m, r in zip(ms, rand, strict=True)]


def window_digits(exponents: Sequence[int], exp_bits: int, window: int) -> np.ndarray:
    """(len(exponents), ceil(exp_bits / window)) array: digit k of a is bits
    [window k, window (k + 1)) of a; every a must lie in [0, 2^exp_bits)."""
    nbytes, rows = -(-exp_bits // 8), -(-exp_bits // window)
    try:
        raw = b"".join(int(a).to_bytes(nbytes, "little") for a in exponents)
    except OverflowError:
        raise PaillierParameterError(f"an exponent must lie in [0, 2^{exp_bits})") from None
    bits = np.unpackbits(
        np.frombuffer(raw, dtype=np.uint8).reshape(-1, nbytes), axis=1, bitorder="little"
    )
    if bits[:, exp_bits:].any():
        raise PaillierParameterError(f"an exponent must lie in [0, 2^{exp_bits})")
    bits = np.pad(bits[:, :exp_bits], ((0, 0), (0, rows * window - exp_bits)))
    weights = np.left_shift(1, np.arange(window, dtype=np.int64))
    return bits.reshape(len(exponents), rows, window).astype(np.int64) @ weights


def with_randomness(n: gmpy2.mpz, m: int, r: gmpy2.mpz) -> gmpy2.mpz:
    """The ciphertext ``(1 + m n) r mod n^2`` of m with the randomness r (an n-th power)."""
    n2 = n * n
    return (1 + gmpy2.mpz(m) * n) % n2 * r % n2


def add_encrypted(
    pub: paillier.PaillierPublicKey, parts: Sequence[Sequence[gmpy2.mpz]]
) -> list[gmpy2.mpz]:
    """Entry-wise sum of encrypted vectors (ciphertext products mod n^2)."""
    if not parts:
        raise PaillierParameterError("add_encrypted needs at least one operand")
    n2 = gmpy2.mpz(pub.nsquare)
    out = list(parts[0])
    for other in parts[1:]:
        if len(other) != len(out):
            raise PaillierParameterError(
                f"operands must have equal length, got {len(other)} vs {len(out)}"
            )
        out = [a * b % n2 for a, b in zip(out, other, strict=True)]
    return out


def add_plain(
    pub: paillier.PaillierPublicKey, cts: Sequence[gmpy2.mpz], values: np.ndarray, frac_bits: int
) -> list[gmpy2.mpz]:
    """Add plaintext reals: multiply by (1 + m n), no randomness needed."""
    n, n2 = gmpy2.mpz(pub.n), gmpy2.mpz(pub.nsquare)
    ms = encode(pub, values, frac_bits)
    if len(ms) != len(cts):
        raise PaillierParameterError(f"plain vector has {len(ms)} entries, ciphertext {len(cts)}")
    return [c * ((1 + gmpy2.mpz(m) * n) % n2) % n2 for c, m in zip(cts, ms, strict=True)]


def masked_matvec(
    pub: paillier.PaillierPublicKey,
    d_cts: Sequence[gmpy2.mpz],
    X: np.ndarray,
    x_frac_bits: int,
    rng: np.random.Generator,
) -> tuple[list[gmpy2.mpz], list[int]]:
    """Encrypted ``X^T d + R`` (R uniform modulo n, returned for the caller to subtract).

    ``X`` is fixed-point encoded with ``x_frac_bits``; the result carries the sum of both
    operands' fractional bits.
    """
    n, n2 = gmpy2.mpz(pub.n), gmpy2.mpz(pub.nsquare)
    b, F = X.shape
    if b != len(d_cts):
        raise PaillierParameterError(f"X has {b} rows but the residual {len(d_cts)} entries")
    Xi = np.rint(np.asarray(X, dtype=np.float64) * 2.0**x_frac_bits).astype(np.int64)
    inv = [gmpy2.invert(c, n2) for c in d_cts]
    bits = max(1, int(np.abs(Xi).max(initial=0)).bit_length())
    out, masks = [], []
    nbytes = (int(n).bit_length() + 7) // 8 + 16  # 128 extra bits: statistically uniform mod n
    for j in range(F):
        col = Xi[:, j].tolist()
        terms = [(d_cts[i] if e > 0 else inv[i], abs(e)) for i, e in enumerate(col) if e]
        acc = multi_exp(terms, n2, bits)
        R = int.from_bytes(rng.bytes(nbytes), "big") % int(n)
        out.append(acc * ((1 + gmpy2.mpz(R) * n) % n2) % n2)
        masks.append(R)
    return out, masks


def multi_exp(
    terms: Sequence[tuple[gmpy2.mpz, int]], modulus: gmpy2.mpz, bits: int, window: int = 6
) -> gmpy2.mpz:
    """``prod g^e mod modulus`` over ``terms`` (e >= 0, < 2^bits) by Pippenger's bucket method.

    Per window of ``window`` exponent bits every term costs one product (into the bucket of
    its digit) and the buckets 2 * 2^window more, instead of ~1.5 products per exponent bit and
    term for separate powmods: 6.8x fewer seconds at 1024 terms of 17 bits, 2048-bit n
    (measured). The result is the same integer.
    """
    mask = (1 << window) - 1
    res = None
    for w in range(-(-bits // window) - 1, -1, -1):
        if res is not None:
            for _ in range(window):
                res = res * res % modulus
        buckets: list[gmpy2.mpz | None] = [None] * (mask + 1)
        shift = w * window
        for g, e in terms:
            k = (e >> shift) & mask
            if k:
                x = buckets[k]
                buckets[k] = g if x is None else x * g % modulus
        # sum_k k * bucket_k as a running product: bucket k enters k times
        run = acc = None
        for k in range(mask, 0, -1):
            x = buckets[k]
            if x is not None:
                run = x if run is None else run * x % modulus
            if run is not None:
                acc = run if acc is None else acc * run % modulus
        if acc is not None:
            res = acc if res is None else res * acc % modulus
    return gmpy2.mpz(1) if res is None else res


def decrypt_vector(priv: paillier.PaillierPrivateKey, cts: Sequence[gmpy2.mpz]) -> list[int]:
    """Residues modulo n (CRT decryption)."""
    return [int(priv.raw_decrypt(int(c))) for c in cts]


def unmask(
    pub: paillier.PaillierPublicKey, masked: Sequence[int], masks: Sequence[int], frac_bits: int
) -> np.ndarray:
    """Subtract the masks modulo n and decode."""
    n = int(pub.n)
    return decode(
        pub, [(int(a) - int(r)) % n for a, r in zip(masked, masks, strict=True)], frac_bits
    )


def to_bytes(pub: paillier.PaillierPublicKey, cts: Sequence[gmpy2.mpz]) -> bytes:
    w = ct_width(pub)
    return b"".join(int(c).to_bytes(w, "big") for c in cts)


def from_bytes(pub: paillier.PaillierPublicKey, data: bytes) -> list[gmpy2.mpz]:
    w = ct_width(pub)
    if len(data) % w:
        raise PaillierParameterError(f"ciphertext bytes must be a multiple of {w}, got {len(data)}")
    cts = [gmpy2.mpz(int.from_bytes(data[i : i + w], "big")) for i in range(0, len(data), w)]
    if any(not 0 < c < pub.nsquare for c in cts):
        raise PaillierParameterError("a ciphertext must lie in (0, n^2)")
    return cts
