"""Secure aggregation's client side of the consistency round and of unmasking: vouch for the
server's survivor list, then answer its unmasking request (once, only for the vouched list).

Split from ``protocols.secagg`` (whose docstring describes the protocol); ``SecAggParty`` inherits
these methods and holds the keys and pending state they use.
"""

from __future__ import annotations

import struct
from hmac import compare_digest
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from protocols import shamir
from protocols.secagg_keys import _COMMIT, _V, _commit, _hkdf, _mac
from protocols.secagg_wire import (
    _HEADER,
    _NONCE,
    CHECK,
    HEADER_BYTES,
    REQUEST,
    RESPONSE,
    SERVER,
    SHARE_RECORD_BYTES,
    VOUCH,
    SecAggAbort,
    _Header,
    _open,
    _where,
)


class _Unmasking:
    """The consistency vouch and the unmasking answer of ``SecAggParty`` (see there)."""

    index: int
    n_parties: int
    threshold: int
    session: bytes | None
    _auth: bytes | None
    _pair_keys: dict[int, bytes]
    _channels: dict[int, AESGCM]
    _pending: dict[tuple[int, int], tuple[int, int, int]]
    _vouched: dict[tuple[int, int], list[int]]
    # and SecAggParty's _require_keys, _reveal and _aad

    def vouch(self, check: Any) -> bytes:
        """Answer the server's survivor list of one aggregation (the consistency round) with a
        vouch for it to every other survivor; a second, different list is refused."""
        self._require_keys()
        if not isinstance(check, bytes | bytearray) or len(check) < HEADER_BYTES:
            raise SecAggAbort(
                f"party {self.index}: the server's survivor list is malformed", SERVER
            )
        h = _Header(*_HEADER.unpack_from(check))
        where = f"party {self.index}: {_where(h.round_id, h.batch_id)}"
        pend = self._pending.get((h.round_id, h.batch_id))
        if pend is None:
            raise SecAggAbort(f"{where}: a survivor list for an aggregation not masked", SERVER)
        _, off, n = pend
        want = _Header(CHECK, self.session, SERVER, self.index, h.round_id, h.batch_id, off, n)
        body = _open(check, self._auth, want, None, where, SERVER, "the server")
        surv = self._survivors(body, where)[0]
        old = self._vouched.setdefault((h.round_id, h.batch_id), surv)
        if old != surv:
            raise SecAggAbort(f"{where}: the server sent two survivor lists {old}, {surv}", SERVER)
        out = _HEADER.pack(VOUCH, self.session, self.index, SERVER, h.round_id, h.batch_id, off, n)
        out += b"".join(self._vouch_tag(self.index, v, h, surv) for v in surv if v != self.index)
        return out + _mac(self._auth, out)

    def _vouch_tag(self, u: int, v: int, h: _Header, surv: list[int]) -> bytes:
        """u's vouch to v for ``surv`` (one key per pair, the direction bound in)."""
        other = v if u == self.index else u
        key = _hkdf(self._pair_keys[other], _V + b"vouch")
        data = struct.pack(">IIQQQI", u, v, h.round_id, h.batch_id, h.offset, h.count)
        return _mac(key, self.session + data + struct.pack(f">{len(surv)}I", *surv))

    def _survivors(self, body: bytes, where: str) -> tuple[list[int], int]:
        """The survivor list at the start of a server's message, checked; and its byte length."""
        M, t = self.n_parties, self.threshold
        ns = struct.unpack_from(">I", body)[0] if len(body) >= 4 else 0
        if not t <= ns <= M or len(body) < 4 + 4 * ns:
            raise SecAggAbort(f"{where}: malformed survivor list ({ns}, need >= {t})", SERVER)
        surv = list(struct.unpack_from(f">{ns}I", body, 4))
        if surv != sorted(set(surv)) or self.index not in surv or surv[-1] >= M:
            raise SecAggAbort(f"{where}: invalid survivors {surv}", SERVER)
        return surv, 4 + 4 * ns

    def respond(self, request: Any) -> bytes:
        """Answer the server's unmasking request of one aggregation (once): shares of b_u for
        every survivor u, and the pair-mask segment shared with every dropped party; only if
        every other survivor vouched for the survivor list this party vouched for."""
        self._require_keys()
        if not isinstance(request, bytes | bytearray) or len(request) < HEADER_BYTES:
            raise SecAggAbort(
                f"party {self.index}: the server's unmasking request is malformed", SERVER
            )
        h = _Header(*_HEADER.unpack_from(request))
        where = f"party {self.index}: {_where(h.round_id, h.batch_id)}"
        pend = self._pending.get((h.round_id, h.batch_id))
        if pend is None:
            raise SecAggAbort(
                f"{where}: the server sent an unmasking request for an aggregation this party "
                "did not mask or already answered (a replay would reveal both masks)",
                SERVER,
            )
        own, off, n = pend
        want = _Header(REQUEST, self.session, SERVER, self.index, h.round_id, h.batch_id, off, n)
        body = _open(request, self._auth, want, None, where, SERVER, "the server")
        del self._pending[(h.round_id, h.batch_id)]  # only after authentication: no DoS by forgery
        surv, at = self._survivors(body, where)
        ns, me = len(surv), self.index
        if len(body) != at + (SHARE_RECORD_BYTES + 2 * _COMMIT) * (ns - 1):
            raise SecAggAbort(f"{where}: malformed request ({len(body)} bytes)", SERVER)
        if self._vouched.get((h.round_id, h.batch_id)) != surv:
            raise SecAggAbort(
                f"{where}: the request's survivor list {surv} is not the one this party vouched "
                f"for ({self._vouched.get((h.round_id, h.batch_id))})",
                SERVER,
            )
        others = [u for u in surv if u != me]
        recs = body[at : at + SHARE_RECORD_BYTES * (ns - 1)]
        coms = body[at + SHARE_RECORD_BYTES * (ns - 1) :][: _COMMIT * (ns - 1)]
        tags = body[at + (SHARE_RECORD_BYTES + _COMMIT) * (ns - 1) :]
        for i, u in enumerate(others):  # everyone was sent this list, or nobody answers
            if not compare_digest(tags[_COMMIT * i :][:_COMMIT], self._vouch_tag(u, me, h, surv)):
                raise SecAggAbort(
                    f"{where}: party {u} did not vouch for the survivor list {surv} (the server "
                    "sent parties different lists, or altered the vouch): nothing revealed",
                    SERVER,
                )
        shares = []
        for i, u in enumerate(others):
            rec = recs[SHARE_RECORD_BYTES * i :][:SHARE_RECORD_BYTES]
            try:
                pt = self._channels[u].decrypt(
                    rec[:_NONCE], rec[_NONCE:], self._aad(u, me, h.round_id, h.batch_id)
                )
                shares.append(shamir.from_bytes(pt))
            except (InvalidTag, ValueError):
                raise SecAggAbort(
                    f"{where}: party {u}'s share for party {me} fails authentication", u
                ) from None
            if (
                _commit(b"share", self.session, u, me, h.round_id, h.batch_id, pt)
                != coms[_COMMIT * i :][:_COMMIT]
            ):
                raise SecAggAbort(
                    f"{where}: party {u}'s share for party {me} does not match party {u}'s "
                    f"commitment (dealt wrongly by party {u})",
                    u,
                )
        shares.insert(surv.index(me), own)
        dropped = sorted(set(range(self.n_parties)) - set(surv))
        out = _HEADER.pack(
            RESPONSE, self.session, self.index, SERVER, h.round_id, h.batch_id, off, n
        )
        out += b"".join(shamir.to_bytes(s) for s in shares)
        for u in dropped:
            out += self._reveal(u, h.round_id, h.batch_id, off, n)
        return out + _mac(self._auth, out)
