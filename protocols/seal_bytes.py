"""SEAL ciphertexts to bytes in SEAL's own format, uncompressed (what sealapi cannot do).

TenSEAL's ``sealapi`` saves an object only to a path and always with zstd. A ciphertext's
coefficients are uniform modulo its primes and do not compress (a 2-prime ciphertext at N = 8192:
262,275 bytes with zstd, 262,257 without), yet the compression costs 0.8 ms per ciphertext, 50x
the copy. :func:`ciphertext_bytes` writes the same object in SEAL's serialization format
(``SEALHeader`` + ``Ciphertext::save_members``) with compr_mode none. The receiver loads it with
SEAL's own ``Ciphertext.load``, which checks the header, the metadata and every coefficient
against the context, exactly as for a compressed one.

How the coefficients are reached: the metadata through sealapi's accessors, the coefficient
array through SEAL's exported ``Ciphertext::data(size_t)``, called by ctypes on the C++ object
that the pybind11 wrapper holds (pybind11's simple instance layout: the object pointer follows
the Python object header). Every read checks the first coefficient of each polynomial against
sealapi's ``data(i)``, and each process checks the bytes once end to end: its first ciphertext
is also saved by SEAL, and the uncompressed bytes, loaded by SEAL and saved again, must give
SEAL's bytes exactly. If a check fails, that process saves with SEAL (slower) from then on.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable

from tenseal import sealapi as seal

MAGIC, HEADER_SIZE, COMPR_NONE = 0xA15E, 16, 0
_HEADER = struct.Struct("<HBBBBHQ")  # magic, header size, version major/minor, compr, 0, size
_MEMBERS = struct.Struct("<4QBQQQdQ")  # parms_id, is_ntt_form, size, N, L, scale, correction


class _Raw:
    """The ctypes entry to SEAL's ``Ciphertext::data(size_t)`` and the checked SEAL version."""

    def __init__(self, version: tuple[int, int]) -> None:
        lib = ctypes.CDLL(seal._sealapi_cpp.__file__)  # already loaded: the same handle
        self.data = lib._ZN4seal10Ciphertext4dataEm  # seal::Ciphertext::data(unsigned long)
        self.data.restype, self.data.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t]
        self.offset = object.__basicsize__  # pybind11 instance: value pointer after PyObject_HEAD
        self.version = version  # SEAL's, as its own save writes it

    def this(self, obj) -> int:
        return ctypes.c_void_p.from_address(id(obj) + self.offset).value

    def coefficients(self, ct: seal.Ciphertext) -> ctypes.Array:
        """The ciphertext's coefficients in place, as bytes (valid while ``ct`` lives)."""
        count = ct.size() * ct.poly_modulus_degree() * ct.coeff_modulus_size()
        ptr = self.data(self.this(ct), 0)
        words = (ctypes.c_uint64 * count).from_address(ptr)
        # the pointer is right only if it reads what sealapi's accessors read
        if words[0] != ct.data(0) or (ct.size() > 1 and words[count // ct.size()] != ct.data(1)):
            raise ValueError("ciphertext layout differs from SEAL's accessors")
        return (ctypes.c_char * (8 * count)).from_address(ptr)

    def dump(self, ct: seal.Ciphertext) -> bytes:
        """``ct`` in SEAL's format, uncompressed."""
        major, minor = self.version
        size, n, primes = ct.size(), ct.poly_modulus_degree(), ct.coeff_modulus_size()
        count = size * n * primes
        # CKKS ciphertexts carry correction factor 1: SEAL changes it only in BGV mod switching
        members = _MEMBERS.pack(*ct.parms_id(), int(ct.is_ntt_form()), size, n, primes, ct.scale, 1)
        inner = _HEADER.pack(MAGIC, HEADER_SIZE, major, minor, COMPR_NONE, 0, 24 + 8 * count)
        total = _HEADER.size + len(members) + len(inner) + 8 + 8 * count
        outer = _HEADER.pack(MAGIC, HEADER_SIZE, major, minor, COMPR_NONE, 0, total)
        data = self.coefficients(ct)
        return b"".join((outer, members, inner, count.to_bytes(8, "little"), data))


_STATE: dict[str, _Raw | None] = {}  # "raw": the checked entry, or None after a failed check


def ciphertext_bytes(
    ct: seal.Ciphertext,
    seal_dump: Callable[[seal.Ciphertext], bytes],
    seal_load: Callable[[bytes], seal.Ciphertext],
) -> bytes:
    """``ct`` in SEAL's format, uncompressed; ``seal_dump``/``seal_load``: SEAL's own save and
    load (the check on first use, and the path taken if the check fails)."""
    if ct.size() == 0:  # no coefficients to point at (an empty object): SEAL's own save
        return seal_dump(ct)
    raw = _entry(ct, seal_dump, seal_load)
    if raw is not None:
        try:
            return raw.dump(ct)
        except ValueError:  # a read that does not match the accessors: SEAL's path from now on
            _STATE["raw"] = None
    return seal_dump(ct)


def _entry(ct, seal_dump, seal_load) -> _Raw | None:
    if "raw" not in _STATE:
        _STATE["raw"] = _checked(ct, seal_dump, seal_load)
    return _STATE["raw"]


def _checked(ct, seal_dump, seal_load) -> _Raw | None:
    """The raw path if, on ``ct``, it gives bytes that SEAL loads into the very same object."""
    try:
        want = seal_dump(ct)
        head = _HEADER.unpack_from(want)
        if head[0] != MAGIC or head[1] != HEADER_SIZE:
            return None
        raw = _Raw((head[2], head[3]))
        return raw if seal_dump(seal_load(raw.dump(ct))) == want else None
    except (AttributeError, OSError, ValueError, RuntimeError, struct.error):
        return None
