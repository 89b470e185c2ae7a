"""The largest frame a party accepts from a peer, derived from the run spec and public sizes.

A networked party refuses any frame whose 12-byte header announces more than this limit, before
the bytes are buffered (:mod:`protocols.mpyc_net`), naming the peer. The limit is the largest
message the run's protocol can legitimately send, times :data:`SLACK_FACTOR`, plus
:data:`SLACK_BYTES`; it is computed from public facts only (row counts, column counts, the
method's options), never from the data. One small function per protocol family:

- :func:`rows_bound` (every family): a message carries at most one split's rows (training or
  test) of at most ``row_width`` float64 values each: intermediate results, embeddings,
  gradients, zeroth-order estimates (``q`` directions per row), secure-aggregation vectors
  (<= 64 bits per value), labels, test scores;
- :func:`mpc_bound` (``dp+mpc``): MPyC share messages of the secure products
  (:func:`protocols.frame_bounds.share_bound`: a row block of a party's matrix, each entry its
  rns residues as float32, or the whole matrix of 57-bit field elements for MPyC's arithmetic);
- :func:`he_bound` (``he``): a minibatch of ciphertexts: CKKS ``2 * N * L * 8`` bytes each
  (uncompressed, L primes in the chain) for a batch's packed values, or Paillier ``bits / 4``
  bytes per value.

Before the run's sizes are known (the handshake) the limit is :data:`HANDSHAKE_FRAME`.
``SECUREVFL_MAX_FRAME_MB`` overrides the derived limit (a site that knows better).
tests/test_frame_limits.py runs every registered method and checks its largest real message
against the bound (without the slack).
"""

from __future__ import annotations

import math
import os
from typing import Any

from protocols.frame_bounds import MAX_FRAME, share_bound
from protocols.wire import WireError, max_frame_from_env
from securevfl.errors import ConfigError

__all__ = [
    "HANDSHAKE_FRAME",
    "MAX_FRAME",
    "SLACK_BYTES",
    "SLACK_FACTOR",
    "frame_limit",
    "he_bound",
    "largest_message",
    "mpc_bound",
    "row_width",
    "rows_bound",
]

HANDSHAKE_FRAME = 1 << 20  # hellos (53 B), run checks (32 B), option hashes (<= 64 KiB)
SLACK_FACTOR = 2  # wire headers, containers, a message the bound's reading of a field misses
SLACK_BYTES = 1 << 20  # control plane: seeds, meters, fingerprints, a party's record
_F8 = 8  # float64 payloads


def row_width(spec: Any, info: Any, method: Any) -> int:
    """Values one row of one message can carry: all columns, embedding and hidden widths,
    classes, an intercept, times (1 + q) zeroth-order directions where the method has ``q``."""
    width = info.n_features + spec.embedding_dim + spec.hidden + (info.n_classes or 1) + 1
    q = spec.option("q", method) if "q" in getattr(method, "options", {}) else 0
    return width * (1 + int(q))


def rows_bound(spec: Any, info: Any, method: Any) -> int:
    """Bytes of one split's rows at :func:`row_width` float64 values each."""
    return max(info.n_train, info.n_test, 1) * row_width(spec, info, method) * _F8


def mpc_bound(spec: Any, info: Any, method: Any) -> int:
    """Bytes of one MPyC share message of the secure products
    (:func:`protocols.frame_bounds.share_bound` of the matrices [v | X_0], X_1, ...)."""
    shapes = {k: (info.n_train, f + (k == 0)) for k, f in enumerate(info.features_per_party)}
    return share_bound(shapes)


def he_bound(spec: Any, info: Any, method: Any) -> int:
    """Bytes of one message of ciphertexts (a minibatch, or the public key at setup)."""
    values = max(min(spec.batch_size, info.n_train), 1) * (max(info.features_per_party) + 2)
    scheme = spec.option("scheme", method)
    if scheme == "paillier":
        return (values + 2) * (spec.option("paillier_bits", method) // 4 + 16)
    if scheme == "ckks":
        n = spec.option("ckks_degree", method)
        chain = len([b for b in str(spec.option("ckks_coeff_bits", method)).split(",") if b])
        ct = 2 * n * chain * _F8 + 4096
        return (math.ceil(values / (n // 2)) + max(info.features_per_party) + 2) * ct
    return values * _F8  # "plain": the same protocol without encryption


_FAMILY_BOUNDS = {"dp+mpc": (mpc_bound,), "he": (he_bound,)}


def largest_message(spec: Any, info: Any, method: Any) -> int:
    """The largest message this run's protocol can legitimately send (bytes, no slack); a
    method whose messages the family bounds do not describe gives its own ``message_bound``."""
    own = getattr(method, "message_bound", None)
    if own is not None:
        return max(rows_bound(spec, info, method), own(spec, info))
    bounds = (rows_bound, *_FAMILY_BOUNDS.get(method.family, ()))
    return max(f(spec, info, method) for f in bounds)


def frame_limit(spec: Any, info: Any, method: Any) -> int:
    """The frame limit of this run: ``SECUREVFL_MAX_FRAME_MB`` if set, else the largest
    legitimate message times :data:`SLACK_FACTOR` plus :data:`SLACK_BYTES` (at most 4 GiB)."""
    if os.environ.get("SECUREVFL_MAX_FRAME_MB", "").strip():
        try:
            return max_frame_from_env()
        except WireError as exc:
            raise ConfigError(str(exc)) from None
    return min(SLACK_FACTOR * largest_message(spec, info, method) + SLACK_BYTES, MAX_FRAME)
