"""Issue 30.1: the frame limit is derived from the run spec, and covers what the run sends.

Every registered method runs tiny in-process (real serialization of every message); its largest
message must fit :func:`~securevfl.runtime.frame_limits.largest_message` (the bound without its
slack). The secure products' MPyC share messages are bounded from the job's shapes.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import baselines
from protocols import rns, wire
from protocols.frame_bounds import job_frame_limit, share_bound
from protocols.rns_blocks import BLOCK_ROWS
from securevfl.errors import ConfigError
from securevfl.experiment import build_views, run_experiment, validate_spec
from securevfl.methods import load_all
from securevfl.registry import _REGISTRIES, create
from securevfl.run_options import build_spec
from securevfl.runtime import inprocess, serialization
from securevfl.runtime.frame_limits import (
    HANDSHAKE_FRAME,
    SLACK_BYTES,
    frame_limit,
    largest_message,
)

load_all()
baselines.load_all()

DP = {"epsilon": 4.0, "delta": 1e-5}
TINY = {  # per method: what keeps its run to about a second
    "afe-vfl": {"n": 150, "bottom": "exact"},
    "he-vfl": {"timed_batches": 1, "n": 150},
    "fm-vfl": {"parties": 3},
    "pbm-vfl": {"n": 120, "embedding_dim": 2, "batch_size": 128, "b": 8},
    "vafl-dp": {"n": 150},
    "secureboost": {"trees": 2, "depth": 2, "paillier_bits": 512},
    "secureboost-dp": {"trees": 2, "depth": 2, "paillier_bits": 512},
}
METHODS = sorted(_REGISTRIES["method"])


def _spec(method: str, **kw):
    m = create("method", method)
    params = {"method": method, "dataset": "breast", "epochs": 1, "seed": 0}
    if m.accepts_epsilon or m.requires_epsilon:
        params.update(DP)
    if m.pooled_data:
        params["parties"] = 1
    params.update(TINY.get(method, {}))
    params.update(kw)
    return build_spec(params)


def _largest_sent(spec, monkeypatch) -> int:
    seen = [0]

    def dumps(value):
        data = wire.dumps(value)
        seen[0] = max(seen[0], len(data))
        return data

    monkeypatch.setattr(serialization, "dumps", dumps)
    monkeypatch.setattr(inprocess.serialization, "dumps", dumps)
    run_experiment(spec)
    return seen[0]


def _bound(spec) -> tuple[int, int]:
    method = validate_spec(spec)
    info, _, _ = build_views(spec, method, [], {})
    return largest_message(spec, info, method), frame_limit(spec, info, method)


@pytest.mark.slow  # ~1 s per method, opacus's import ~10 s on a loaded machine
@pytest.mark.parametrize("method", METHODS)
def test_every_method_sends_no_message_over_its_derived_bound(method, monkeypatch):
    spec = _spec(method)
    sent = _largest_sent(spec, monkeypatch)
    bound, limit = _bound(spec)
    assert sent <= bound, (method, sent, bound)
    assert limit == 2 * bound + SLACK_BYTES
    # derived, not a fixed cap: a tiny run allows far less than the old 256 MiB
    assert limit < 64 << 20, (method, limit)


@pytest.mark.parametrize(
    "kw,least",
    [
        ({"scheme": "ckks"}, 100_000),  # one CKKS ciphertext at N = 8192
        ({"scheme": "paillier", "paillier_bits": 1024}, 32 * 256),  # a batch of 2048-bit ints
    ],
)
def test_he_ciphertext_messages_fit_the_he_bound(kw, least, monkeypatch):
    spec = _spec("he-vfl", batch_size=32, **kw)
    sent = _largest_sent(spec, monkeypatch)
    bound, _ = _bound(spec)
    assert sent > least  # ciphertexts, not plain floats
    assert sent <= bound, (kw, sent, bound)


def test_the_limit_grows_with_the_run_and_the_env_overrides_it(monkeypatch):
    small = _spec("vfl", n=100)
    large = dataclasses.replace(small, embedding_dim=64, hidden=256)
    assert _bound(large)[1] > _bound(small)[1]
    monkeypatch.setenv("SECUREVFL_MAX_FRAME_MB", "3")
    assert _bound(small)[1] == 3 << 20
    monkeypatch.setenv("SECUREVFL_MAX_FRAME_MB", "-1")
    with pytest.raises(ConfigError, match="SECUREVFL_MAX_FRAME_MB"):
        _bound(small)


def test_share_bound_follows_the_job_shapes():
    shapes = {"0": [1000, 11], "1": [1000, 20]}
    assert share_bound(shapes) == 1000 * 20 * max(4 * len(rns.PRIMES), 16) + 4096
    big = {"0": [10 * BLOCK_ROWS, 5]}  # rns streams row blocks; MPyC's field inputs do not
    assert share_bound(big) == 10 * BLOCK_ROWS * 5 * 16 + 4096
    assert job_frame_limit(shapes) == 2 * share_bound(shapes) + (1 << 20)
    assert HANDSHAKE_FRAME == 1 << 20


def test_a_real_share_message_fits_the_bound():
    """An rns share block as the dealer packs it, and a field-element matrix as MPyC sends it."""
    rng = np.random.default_rng(0)
    n, d = 300, 7
    residues = rng.integers(-(2**20), 2**20, size=(len(rns.PRIMES), n, d)).astype(np.float64)
    packed = wire.dumps(rns.pack(residues))
    field = wire.dumps(rng.integers(0, 2**57, size=(n, d)).astype(object))
    assert max(len(packed), len(field)) <= share_bound({0: (n, d)})
