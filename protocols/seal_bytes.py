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

:class:`Memory` is the same access as writable numpy views (ciphertexts and plaintexts), for
:mod:`protocols.ckks_codec`, which fills SEAL objects with coefficients numpy computed.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable

import numpy as np
from tenseal import sealapi as seal

MAGIC, HEADER_SIZE, COMPR_NONE = 0xA15E, 16, 0
_HEADER = struct.Struct("<HBBBBHQ")  # magic, header size, version major/minor, compr, 0, size
_MEMBERS = struct.Struct("<4QBQQQdQ")  # parms_id, is_ntt_form, size, N, L, scale, correction


class Memory:
    """Checked access to the coefficient arrays of SEAL objects, as writable numpy views.

    A ciphertext's array through SEAL's exported ``Ciphertext::data(size_t)``; a plaintext's
    (whose ``data()`` is inline, so not exported) through its members' layout in SEAL 4:
    ``parms_id`` (4 words), ``coeff_count``, ``scale``, then its ``DynArray`` (memory pool
    handle: 2 words, capacity, size, data pointer). Every view is checked against what sealapi's
    accessors read (counts, scale, first and last coefficients) before it is returned; a
    mismatch raises ValueError and the caller takes SEAL's own path. A view is valid while its
    object lives and is not resized.
    """

    def __init__(self) -> None:
        lib = ctypes.CDLL(seal._sealapi_cpp.__file__)  # already loaded: the same handle
        self.data = lib._ZN4seal10Ciphertext4dataEm  # seal::Ciphertext::data(unsigned long)
        self.data.restype, self.data.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t]
        self.offset = object.__basicsize__  # pybind11 instance: value pointer after PyObject_HEAD

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

    def ciphertext_words(self, ct: seal.Ciphertext) -> np.ndarray:
        """``ct``'s coefficients (polynomial, prime, coefficient order) as a uint64 view."""
        return np.frombuffer(self.coefficients(ct), dtype=np.uint64)

    def plaintext_words(self, pt: seal.Plaintext) -> np.ndarray:
        """``pt``'s ``coeff_count`` words (prime-major in NTT form) as a uint64 view."""
        n = pt.coeff_count()
        head = (ctypes.c_uint64 * 11).from_address(self.this(pt))
        scale = struct.unpack("<d", struct.pack("<Q", head[5]))[0]
        if n < 1 or head[4] != n or head[9] != n or head[8] < n or not head[10]:
            raise ValueError("plaintext layout differs from SEAL 4's")
        if scale != pt.scale:
            raise ValueError("plaintext layout differs from SEAL 4's")
        words = np.ctypeslib.as_array((ctypes.c_uint64 * n).from_address(head[10]))
        if words[0] != pt.data(0) or words[n - 1] != pt.data(n - 1):
            raise ValueError("plaintext layout differs from SEAL's accessors")
        return words


_MEMORY: dict[int, Memory | None] = {}


def memory() -> Memory | None:
    """This process's :class:`Memory`, or None where SEAL's symbol cannot be reached."""
    if 0 not in _MEMORY:
        try:
            _MEMORY[0] = Memory()
        except (AttributeError, OSError):
            _MEMORY[0] = None
    return _MEMORY[0]


class _Raw:
    """Uncompressed ciphertext bytes through :class:`Memory`, with the checked SEAL version."""

    def __init__(self, version: tuple[int, int], mem: Memory | None = None) -> None:
        self.memory = mem if mem is not None else Memory()
        self.version = version  # SEAL's, as its own save writes it

    def coefficients(self, ct: seal.Ciphertext) -> ctypes.Array:
        return self.memory.coefficients(ct)

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
