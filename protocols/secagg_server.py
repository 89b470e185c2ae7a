"""Secure aggregation's server: relay keys, collect masked values, the consistency round,
unmasking requests and recovery of the exact sum; ``aggregate_round`` runs one in a process.

Split from ``protocols.secagg`` (whose docstring describes the protocol).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from protocols import shamir
from protocols.bitpack import packed_bytes, unpack_bits, unpack_sum
from protocols.secagg_keys import _COMMIT, _V, _aes_stream, _commit, _hkdf, _mac, _raw, _self_mask
from protocols.secagg_party import SecAggParty
from protocols.secagg_wire import (
    _HEADER,
    CHECK,
    HEADER_BYTES,
    MASKED,
    NO_OFFSET,
    REQUEST,
    RESPONSE,
    SERVER,
    SHARE_RECORD_BYTES,
    TAG_BYTES,
    VOUCH,
    SecAggAbort,
    SecAggError,
    _check_params,
    _Header,
    _open,
    _params,
    _where,
)


@dataclass
class _Collected:
    round_id: int
    batch_id: int
    offset: int
    count: int
    survivors: list[int]
    dropped: list[int]
    bodies: dict[int, bytes]
    commits: dict[int, bytes]  # seed | M shares | M - 1 reveals, 32 bytes each, per survivor


class SecAggServer:
    """The aggregator: relays public keys, then per aggregation ``collect`` (masked messages in,
    survivor lists out), ``requests`` (vouches in, unmasking requests out) and ``finish``
    (responses in, the exact sum out) or SecAggAbort."""

    def __init__(
        self,
        n_parties: int,
        *,
        bits: int,
        threshold: int | None = None,
        session: bytes | None = None,
    ) -> None:
        self.threshold = _check_params(n_parties, bits, threshold)
        self.n_parties, self.bits = n_parties, bits
        self.session = bytes(session) if session is not None else os.urandom(16)
        self._sk = X25519PrivateKey.generate()
        self._auth: dict[int, bytes] = {}
        self._state: _Collected | None = None
        self._records: dict[int, bytes] = {}
        self.survivors: list[int] = []  # the parties summed by the last ``finish``

    @property
    def public_key(self) -> bytes:
        """The server's X25519 public key, relayed with the parties' keys."""
        return _raw(self._sk)

    def relay(self, public_keys: Mapping[int, Any]) -> dict[int, bytes]:
        """Check every party published a 32-byte key, derive the auth keys; return the table."""
        out = {}
        params = _params(self.n_parties, self.bits, self.threshold)
        for k in range(self.n_parties):
            pk = public_keys.get(k)
            if pk is None:
                raise SecAggAbort(f"key agreement aborted: party {k} published no public key", k)
            if not isinstance(pk, bytes | bytearray) or len(pk) != 32:
                raise SecAggAbort(
                    f"key agreement aborted: party {k}'s public key must be 32 bytes, got "
                    f"{len(pk) if isinstance(pk, bytes | bytearray) else type(pk).__name__}",
                    k,
                )
            out[k] = bytes(pk)
            shared = self._sk.exchange(X25519PublicKey.from_public_bytes(out[k]))
            info = _V + b"auth" + struct.pack(">I", k) + params
            self._auth[k] = _hkdf(shared, info, self.session)
        return out

    def _masked_size(self, count: int) -> int:
        return (
            HEADER_BYTES
            + packed_bytes(count, self.bits)
            + SHARE_RECORD_BYTES * (self.n_parties - 1)
            + _COMMIT * 2 * self.n_parties
            + TAG_BYTES
        )

    def collect(
        self,
        messages: Mapping[int, Any],
        *,
        round_id: int,
        batch_id: int,
        count: int,
        offset: int | None = None,
    ) -> dict[int, bytes]:
        """Check the masked messages; return the unmasking request for each survivor."""
        if not self._auth:
            raise SecAggError("the server must relay the public keys before aggregating")
        where, M = _where(round_id, batch_id), self.n_parties
        off = NO_OFFSET if offset is None else offset
        need, size = packed_bytes(count, self.bits), self._masked_size(count)
        bodies, records, commits = {}, {}, {}
        for k in range(M):
            msg = messages.get(k)
            if msg is None:
                continue  # a dropout, recovered below if few enough
            want = _Header(MASKED, self.session, k, SERVER, round_id, batch_id, off, count)
            body = _open(msg, self._auth[k], want, size, where, k, f"party {k}")
            recs = need + SHARE_RECORD_BYTES * (M - 1)
            bodies[k], records[k], commits[k] = body[:need], body[need:recs], body[recs:]
        surv = sorted(bodies)
        dropped = [k for k in range(M) if k not in bodies]
        if len(surv) < self.threshold:
            raise SecAggAbort(
                f"{where}: parties {dropped} sent no masked values; {len(surv)} remain, fewer "
                f"than the {self.threshold} needed to unmask (at most {M - self.threshold} "
                "may drop)",
                dropped[0],
                dropped,
            )
        self._state = _Collected(round_id, batch_id, off, count, surv, dropped, bodies, commits)
        self._records = records
        head = struct.pack(f">I{len(surv)}I", len(surv), *surv)
        out = {}
        for v in surv:  # the consistency round first: every survivor is sent the same list
            msg = _HEADER.pack(CHECK, self.session, SERVER, v, round_id, batch_id, off, count)
            out[v] = msg + head + _mac(self._auth[v], msg + head)
        return out

    def requests(self, vouches: Mapping[int, Any]) -> dict[int, bytes]:
        """The survivors' vouches for the survivor list in; each survivor's unmasking request
        out: the list, the shares dealt to it, the dealers' commitments to them, and every
        other survivor's vouch to it."""
        st = self._state
        if st is None:
            raise SecAggError("requests need a collected aggregation (call collect first)")
        where, surv, ns = _where(st.round_id, st.batch_id), st.survivors, len(st.survivors)
        size = HEADER_BYTES + _COMMIT * (ns - 1) + TAG_BYTES
        tags = {}
        for v in surv:
            if vouches.get(v) is None:
                raise SecAggAbort(f"{where}: party {v} sent no vouch for the survivor list", v)
            want = _Header(
                VOUCH, self.session, v, SERVER, st.round_id, st.batch_id, st.offset, st.count
            )
            tags[v] = _open(vouches[v], self._auth[v], want, size, where, v, f"party {v}")
        head = struct.pack(f">I{ns}I", ns, *surv)
        out = {}
        for v in surv:
            others = [u for u in surv if u != v]
            fwd = b"".join(
                self._records[u][(v - (v > u)) * SHARE_RECORD_BYTES :][:SHARE_RECORD_BYTES]
                for u in others
            )
            coms = b"".join(st.commits[u][_COMMIT * (1 + v) :][:_COMMIT] for u in others)
            vouched = b"".join(
                tags[u][_COMMIT * [w for w in surv if w != u].index(v) :][:_COMMIT] for u in others
            )
            msg = _HEADER.pack(
                REQUEST, self.session, SERVER, v, st.round_id, st.batch_id, st.offset, st.count
            )
            msg += head + fwd + coms + vouched
            out[v] = msg + _mac(self._auth[v], msg)
        return out

    def finish(self, responses: Mapping[int, Any]) -> np.ndarray:
        """The sum over the survivors (uint64, length ``count``), or SecAggAbort naming a party."""
        st, self._state = self._state, None
        if st is None:
            raise SecAggError("finish needs a collected aggregation (call collect first)")
        where = _where(st.round_id, st.batch_id)
        ns, nd, t = len(st.survivors), len(st.dropped), self.threshold
        need = packed_bytes(st.count, self.bits)
        # per dropped party: a commitment nonce, then the aggregation's 32-byte pair key or the
        # packed round segment
        reveal = 32 + (32 if st.offset == NO_OFFSET else need)
        size = HEADER_BYTES + shamir.SHARE_BYTES * ns + reveal * nd + TAG_BYTES
        got, missing = {}, []
        for v in st.survivors:
            msg = responses.get(v)
            if msg is None:
                missing.append(v)
                continue
            want = _Header(
                RESPONSE, self.session, v, SERVER, st.round_id, st.batch_id, st.offset, st.count
            )
            got[v] = _open(msg, self._auth[v], want, size, where, v, f"party {v}")
        if missing and (st.dropped or len(got) < t):
            why = (
                f"it holds the pair masks with dropped parties {st.dropped}"
                if st.dropped
                else f"fewer than {t} answered"
            )
            raise SecAggAbort(
                f"{where}: parties {missing} sent no unmasking response ({why})",
                missing[0],
                missing,
            )
        resp = sorted(got)
        M, sess, rb = self.n_parties, self.session, (st.round_id, st.batch_id)
        lam = shamir.lagrange_at_zero(resp[:t])
        lam2 = shamir.lagrange_at_zero(resp[-t:]) if len(resp) > t else None
        total = unpack_sum([st.bodies[u] for u in st.survivors], self.bits, st.count)
        for pos, u in enumerate(st.survivors):
            com = st.commits[u]
            shares = {}
            for v in resp:
                raw = got[v][32 * pos : 32 * pos + 32]
                # every share against the dealer's commitment: the responder that altered one is
                # named, with exactly t responders as with more
                if _commit(b"share", sess, u, v, *rb, raw) != com[_COMMIT * (1 + v) :][:_COMMIT]:
                    raise SecAggAbort(
                        f"{where}: party {v}'s share of party {u}'s self-mask seed does not match "
                        f"party {u}'s commitment (altered by party {v})",
                        v,
                    )
                try:
                    shares[v] = shamir.from_bytes(raw)
                except ValueError:
                    raise SecAggAbort(f"{where}: party {v} sent an invalid share", v) from None
            seed = shamir.reconstruct(shares, lam)
            # the shares are what u dealt; if they do not open u's committed seed (or disagree
            # among themselves), u dealt them wrongly
            if _commit(b"seed", sess, u, u, *rb, shamir.to_bytes(seed)) != com[:_COMMIT] or (
                lam2 is not None and shamir.reconstruct(shares, lam2) != seed
            ):
                raise SecAggAbort(
                    f"{where}: the shares party {u} dealt of its self-mask seed do not open its "
                    f"commitment (dealt wrongly by party {u})",
                    u,
                )
            total -= _self_mask(seed, st.count, self.bits).astype(np.uint64)
        for pos, u in enumerate(st.dropped):
            for v in st.survivors:
                start = 32 * ns + reveal * pos
                rec = got[v][start : start + reveal]
                at = _COMMIT * (1 + M + u - (u > v))  # v's reveal commitments skip v itself
                if _commit(b"reveal", sess, v, u, *rb, rec) != st.commits[v][at : at + _COMMIT]:
                    raise SecAggAbort(
                        f"{where}: party {v}'s pair mask with dropped party {u} does not match "
                        f"party {v}'s commitment (altered by party {v})",
                        v,
                    )
                part = rec[32:]
                if st.offset == NO_OFFSET:
                    m = _aes_stream(part, st.count, "<u4").astype(np.uint64)
                else:
                    m = unpack_bits(part, self.bits, st.count)
                # survivor v added m_vu if v < u, subtracted it otherwise; uint64 wraps mod 2^64
                if v < u:
                    total -= m
                else:
                    total += m
        self.survivors = list(st.survivors)
        return total & np.uint64((1 << self.bits) - 1)


def aggregate_round(
    server: SecAggServer,
    parties: Mapping[int, SecAggParty],
    values: Mapping[int, np.ndarray],
    *,
    round_id: int,
    batch_id: int,
    offset: int | None = None,
    drop: Iterable[int] = (),
) -> np.ndarray:
    """One aggregation with every party in this process (tests, demos, benchmarks); parties in
    ``drop`` go silent after key agreement."""
    gone = set(drop)
    msgs = {
        k: p.mask(values[k], round_id=round_id, batch_id=batch_id, offset=offset)
        for k, p in parties.items()
        if k not in gone
    }
    count = int(np.asarray(next(iter(values.values()))).size)
    checks = server.collect(msgs, round_id=round_id, batch_id=batch_id, count=count, offset=offset)
    reqs = server.requests({v: parties[v].vouch(c) for v, c in checks.items()})
    return server.finish({v: parties[v].respond(r) for v, r in reqs.items()})
