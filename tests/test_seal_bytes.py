"""Uncompressed SEAL ciphertext bytes: the object SEAL saved, checked by SEAL on load."""

import struct

import numpy as np
import pytest
from tenseal import sealapi as seal

from protocols import ckks_packed as cp
from protocols import seal_bytes as sb


@pytest.fixture(scope="module")
def side():
    holder = cp.KeyHolder(cp.PackedParams())
    return cp.load_public(holder.params, holder.public_bytes())


def _ciphertexts(side):
    rng = np.random.default_rng(3)
    two = side.encrypt(side.encode(rng.normal(size=side.params.slots).tolist(), 2.0**40))
    one = seal.Ciphertext()
    side.evaluator.mod_switch_to_next(two, one)  # one prime, another parms_id
    return two, one


def test_uncompressed_bytes_load_into_the_object_seal_saved(side):
    spool = cp._spool()
    for ct in _ciphertexts(side):
        ours = side.to_bytes(ct)
        assert sb._STATE["raw"] is not None  # the raw path passed its check here
        magic, _, _, _, compr, _, total = struct.unpack_from("<HBBBBHQ", ours)
        n = ct.size() * ct.poly_modulus_degree() * ct.coeff_modulus_size()
        assert (magic, compr, total, len(ours)) == (0xA15E, 0, len(ours), 113 + 8 * n)
        # SEAL loads our bytes into an object that SEAL saves exactly as it saved the original
        assert spool.dump(side.from_bytes(ours)) == spool.dump(ct)
        assert side.to_bytes(side.from_bytes(ours)) == ours


def test_a_coefficient_out_of_range_or_a_wrong_size_is_refused(side):
    two, _ = _ciphertexts(side)
    data = bytearray(side.to_bytes(two))
    bad = bytearray(data)
    bad[-8:] = (2**64 - 1).to_bytes(8, "little")  # above every prime
    with pytest.raises(cp.CKKSParameterError, match="valid SEAL ciphertext"):
        side.from_bytes(bytes(bad))
    bad = bytearray(data)
    struct.pack_into("<Q", bad, 16 + 33, 3)  # claims 3 polynomials, carries 2
    with pytest.raises(cp.CKKSParameterError, match="valid SEAL ciphertext"):
        side.from_bytes(bytes(bad))


def test_a_failed_check_falls_back_to_seals_own_save(side, monkeypatch):
    two, _ = _ciphertexts(side)
    monkeypatch.setattr(sb, "_STATE", {})
    monkeypatch.setattr(sb._Raw, "coefficients", lambda self, ct: bytes(8 * 2 * 2 * 8192))
    spool = cp._spool()
    assert side.to_bytes(two) == spool.dump(two)  # zeros would not load as the same object
    assert sb._STATE["raw"] is None


def test_an_empty_ciphertext_is_saved_by_seal(side):
    empty = seal.Ciphertext()
    assert side.to_bytes(empty) == cp._spool().dump(empty)


def test_a_read_that_disagrees_with_the_accessors_falls_back_for_good(side, monkeypatch):
    two, _ = _ciphertexts(side)
    side.to_bytes(two)  # the raw path checked and taken
    monkeypatch.setattr(sb, "_STATE", dict(sb._STATE))
    monkeypatch.setattr(two.__class__, "data", lambda self, i=0: -1, raising=True)
    assert side.to_bytes(two) == cp._spool().dump(two)
    assert sb._STATE["raw"] is None
