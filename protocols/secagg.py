"""Secure aggregation with authenticated messages and dropout recovery (Bonawitz et al., CCS 2017).

M parties each hold a vector of non-negative integers q_m (PBM outputs in [0, b]); an
honest-but-curious server must learn sum_m q_m and nothing else, even when up to M - t parties
drop out after key agreement (t = ``threshold``, by default floor(M/2) + 1).

* Setup: every party (and the server) makes an X25519 key pair; the server relays all public
  keys with a fresh session id. HKDF-SHA256 (session, pair ids and the public parameters M, r, t
  bound in) turns each shared secret into: a *pair mask key* and a *channel key* for every pair
  of parties, and an *auth key* between each party and the server. The public keys themselves
  must reach the parties authentically (TLS with pinned certificates, as in the networked runtime,
  or a PKI): against an active man in the middle at setup no MAC helps.
* Masking (one aggregation = a (round, batch)): y_u = q_u + PRG(b_u) + sum_{v>u} m_uv -
  sum_{v<u} m_uv mod 2^r. The pair masks m_uv are AES-256-CTR keystreams under HKDF(pair key,
  round[, batch]); with ``prepare_round`` one keystream per (pair, round) whose disjoint segment
  at ``offset`` serves each batch. The *self mask* PRG(b_u) comes from a fresh seed b_u per
  aggregation, t-of-M Shamir-shared (``protocols.shamir``) to every party, each share sealed
  with AES-GCM under the channel key of the pair (sender, receiver, session, round, batch as
  associated data) and relayed by the server inside u's message.
* Every message is ``header | body | HMAC-SHA256(auth key, header | body)``. The header names kind,
  session, sender, receiver, round, batch, offset and count; the server accepts it only if all of
  them match the aggregation at hand and the tag verifies. A replayed body under a fresh header,
  a forged, truncated or extended message, or one that is not bytes aborts naming the party.
* Unmasking: the survivors S (valid masked messages) must number at least t, else the round
  aborts naming the dropped parties D. The server sends each survivor S and the shares addressed
  to it; the survivor answers with its shares of b_u for every u in S and, for every dropped u,
  the pair mask m_uv of this aggregation only: its 32-byte AES key (HKDF of the pair key,
  round and batch), or with ``prepare_round`` the packed segment of the round's stream. The
  survivor holds the pair key, and what it reveals is useless for any other aggregation, which
  is why no pair secret needs Shamir sharing here (Bonawitz et al. share the pairwise secret key
  instead, as their keys serve one aggregation). A party
  answers at most one request per aggregation, so the server never holds both b_u and u's pair
  masks for the same aggregation: a late message from a "dropped" party stays hidden by its self
  mask. The server reconstructs each b_u from t shares (checked against a second set of t when
  more answered), removes self masks and the dropped parties' pair masks, and returns the sum.
  Pair masks with a dropped party are known only to survivors, so with D non-empty every
  survivor must answer; without dropouts any t answers suffice.
* Consistency check (Bonawitz et al.'s ConsistencyCheck round, with pairwise MACs in place of
  signatures): before any unmasking, the server sends each survivor the survivor list S; each
  survivor u returns, for every other v in S, ``HMAC(vouch key of u and v, u > v | aggregation |
  S)``; the server forwards to v the vouches of all of S, and v answers only if each verifies over
  the S it was sent itself. A malicious server that sends different lists to different parties
  (to get the shares of b_u from some and u's pair masks from others, i.e. u's input) gets no
  answer: the server cannot make the vouch of u for another list. The request also carries each
  dealer's commitment to the recipient's share, so a responder names a dealer whose share does
  not match its commitment before answering (an honest responder is never blamed for it).

What each protocol resists: a server that deviates in any way learns nothing beyond the sum of
the survivors (it can still abort or drop parties); dealers and responders that deviate are
named (a forged share, reveal, or dealing) and never change the sum silently; parties that
collude with the server learn what their own inputs and the sum imply (t > M / 2 keeps two
disjoint groups of t from vouching for two lists).

Nothing here imports ``securevfl``: the caller moves the bytes (and meters them).

The code: ``secagg_wire`` (message layout, errors, parameters), ``secagg_keys`` (key derivation,
masks, commitments), ``secagg_party`` (the client) and ``secagg_server`` (the server and
``aggregate_round``); the public names are imported from here.
"""

from __future__ import annotations

from protocols.bitpack import MAX_BITS, pack_bits, unpack_bits, unpack_sum
from protocols.secagg_keys import _mac  # noqa: F401  (tests forge tags with it)
from protocols.secagg_party import SecAggParty
from protocols.secagg_server import SecAggServer, aggregate_round
from protocols.secagg_wire import (
    HEADER_BYTES,
    SERVER,
    SHARE_RECORD_BYTES,
    TAG_BYTES,
    SecAggAbort,
    SecAggError,
    default_threshold,
    modulus_bits,
)

__all__ = [
    "HEADER_BYTES",
    "MAX_BITS",
    "SERVER",
    "SHARE_RECORD_BYTES",
    "TAG_BYTES",
    "SecAggAbort",
    "SecAggError",
    "SecAggParty",
    "SecAggServer",
    "aggregate_round",
    "default_threshold",
    "modulus_bits",
    "pack_bits",
    "unpack_bits",
    "unpack_sum",
]
