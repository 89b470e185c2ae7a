"""CKKS slots encoded and decoded in numpy (SEAL's NTTs): the values SEAL's own encoder gives."""

import numpy as np
import pytest
from tenseal import sealapi as seal

from protocols import ckks_packed as cp
from protocols import seal_bytes as sb
from protocols.ckks_codec import SlotCodec


@pytest.fixture(scope="module")
def holder():
    return cp.KeyHolder(cp.PackedParams())


def _rows(count, seed=1, slots=4096):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (count, slots)) + 1j * rng.uniform(-1, 1, (count, slots))


def _seal(holder, row, scale, parms_id=None):
    pt = seal.Plaintext()
    if parms_id is None:
        holder.encoder.encode(row.tolist(), scale, pt)
    else:
        holder.encoder.encode(row.tolist(), parms_id, scale, pt)
    return pt


def _decoded(holder, pt):
    return np.array(holder.encoder.decode_complex(pt))


@pytest.mark.parametrize("level", ["first", "final"])
def test_encode_gives_the_plaintext_seal_gives(holder, level):
    # odd count, a zero row, a short row: every placement in the NTT containers
    rows = list(_rows(3))
    rows.insert(1, np.zeros(4096))
    rows.append(np.array([0.25 - 0.5j, 1.0]))
    parms_id, scale = (None, 2.0**50) if level == "first" else cp.final_level(holder)
    pts = holder.encode_many(rows, scale, parms_id)
    for row, pt in zip(rows, pts, strict=True):
        want = _seal(holder, np.pad(row, (0, 4096 - len(row))), scale, parms_id)
        assert pt.parms_id() == want.parms_id() and pt.scale == want.scale
        assert pt.is_ntt_form() and pt.coeff_count() == want.coeff_count()
        # numpy's FFT and SEAL's differ in the last bits: a coefficient may move by one unit
        full = np.pad(row, (0, 4096 - len(row)))
        # each coefficient rounded to an integer at ``scale``: a slot within ~sqrt(N) / scale
        bound = 4 * np.sqrt(8192) / scale  # 3.4e-13 at 2^50, 3.4e-7 at the final 2^30
        assert np.max(np.abs(_decoded(holder, pt) - full)) < bound
        assert np.max(np.abs(_decoded(holder, pt) - _decoded(holder, want))) < 2 * bound


def test_products_decrypt_to_what_seal_decodes(holder):
    rng = np.random.default_rng(2)
    d = rng.normal(size=4096)
    ct_d = holder.encrypt(holder.encode(d, 2.0**40))
    for count in (1, 2, 5):
        cts = []
        for pt in holder.encode_many(_rows(count, seed=count), 2.0**50):
            out = seal.Ciphertext()
            holder.evaluator.multiply_plain(ct_d, pt, out)
            holder.evaluator.rescale_to_next_inplace(out)
            cts.append(out)
        want = [holder.decrypt(ct) for ct in cts]  # SEAL's decode, before the containers
        got = holder.decrypt_many(cts)
        assert len(got) == count
        for g, w, x in zip(got, want, _rows(count, seed=count), strict=True):
            assert np.max(np.abs(g - w)) < 1e-9
            assert np.max(np.abs(g - x * d)) < 1e-4  # the product itself


def test_the_plaintext_view_reads_what_seals_accessors_read(holder):
    pt = _seal(holder, _rows(1)[0], 2.0**50)
    words = sb.memory().plaintext_words(pt)
    assert len(words) == pt.coeff_count() == 2 * 8192
    for i in (0, 1, 8191, 8192, 16383):
        assert int(words[i]) == pt.data(i)


def test_without_memory_access_seals_encoder_does_the_same_work(holder, monkeypatch):
    codec = SlotCodec(holder.ctx, holder.evaluator, holder.encoder)
    rows = _rows(3, seed=4)
    fast = codec.encode(rows, 2.0**50)
    monkeypatch.setattr(codec, "memory", None)
    slow = codec.encode(rows, 2.0**50)
    for a, b in zip(fast, slow, strict=True):
        assert np.max(np.abs(_decoded(holder, a) - _decoded(holder, b))) < 1e-12


def test_a_failed_layout_check_falls_back_for_good(holder, monkeypatch):
    codec = SlotCodec(holder.ctx, holder.evaluator, holder.encoder)

    def refuse(self, pt):
        raise ValueError("plaintext layout differs from SEAL 4's")

    monkeypatch.setattr(sb.Memory, "plaintext_words", refuse)
    rows = _rows(2, seed=5)
    pts = codec.encode(rows, 2.0**50)
    assert codec.memory is None
    for row, pt in zip(rows, pts, strict=True):
        assert np.max(np.abs(_decoded(holder, pt) - row)) < 1e-12


@pytest.mark.parametrize("value", [2.0**13, np.nan])
def test_values_too_large_for_the_level_are_refused(holder, value):
    level, scale = cp.final_level(holder)  # one 60-bit prime
    with pytest.raises(cp.CKKSParameterError, match="encoded values must fit the modulus"):
        holder.encode_many([np.full(4096, value)], scale * 2.0**20, level)
    with pytest.raises(cp.CKKSParameterError, match="at most 4096 values"):
        holder.encode_many([np.zeros(4097)], 2.0**40)


def test_a_ciphertext_of_another_shape_is_decoded_by_seal_this_once(holder):
    """A peer's ciphertext at two primes or of three polynomials is no container: SEAL decodes
    those, and the numpy path stays on for the next call."""
    rng = np.random.default_rng(6)
    d = rng.normal(size=4096)
    ct_d = holder.encrypt(holder.encode(d, 2.0**40))
    x = holder.encode(rng.normal(size=4096), 2.0**20)
    two_primes = seal.Ciphertext()
    holder.evaluator.multiply_plain(ct_d, x, two_primes)  # not rescaled: two primes
    three = seal.Ciphertext()
    small = holder.encrypt(holder.encode(d, 2.0**25))  # squared: 2^50, fits one prime
    holder.evaluator.square(small, three)  # three polynomials (no relinearization keys)
    holder.evaluator.mod_switch_to_next_inplace(three)  # one prime
    assert (three.size(), three.coeff_modulus_size()) == (3, 1)
    for ct in (two_primes, three):
        ref = holder.decrypt(ct)
        (got,) = holder.decrypt_many([ct])
        np.testing.assert_array_equal(got, ref)
        assert holder.codec.memory is not None
    (got,) = holder.decrypt_many([two_primes])
    assert np.max(np.abs(got - d * _decoded(holder, x))) < 1e-6  # the product itself


def test_a_value_too_large_leaves_the_numpy_path_on():
    holder = cp.KeyHolder(cp.PackedParams())
    level, scale = cp.final_level(holder)
    with pytest.raises(cp.CKKSParameterError):
        holder.encode_many([np.full(4096, 2.0**13)], scale * 2.0**20, level)
    assert holder.codec.memory is not None  # the caller's error, not the layout's
