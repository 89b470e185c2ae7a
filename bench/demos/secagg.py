"""``securevfl demo secagg``: PBM + authenticated, dropout-tolerant secure aggregation.

Prints each party's embedding and PBM values, the masked values the server receives (uniform
mod 2^r), the message layout (header, values, sealed Shamir shares of the self-mask seed, HMAC
tag), what survivors send back to unmask, the sum the server recovers and its estimate of the
embedding sum; then what a replayed or truncated message does (the round aborts naming the party).
"""

from __future__ import annotations

import argparse

import numpy as np

from protocols.secagg import (
    HEADER_BYTES,
    SHARE_RECORD_BYTES,
    TAG_BYTES,
    SecAggAbort,
    SecAggParty,
    SecAggServer,
    modulus_bits,
    unpack_bits,
)
from securevfl.errors import ConfigError, check_int
from securevfl.privacy.pbm import check_pbm_params, pbm_estimate_sum, pbm_quantize

NAME = "secagg"
HELP = "PBM values, masked values seen by the server, dropout recovery and the recovered sum"


def main(args: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="securevfl demo secagg", description=HELP)
    ap.add_argument("--parties", type=int, default=3, help="data parties M >= 2; default 3")
    ap.add_argument("--b", type=int, default=8, help="PBM trials b; default 8")
    ap.add_argument("--beta", type=float, default=0.25, help="PBM beta in (0, 0.25]; default 0.25")
    ap.add_argument("--dim", type=int, default=4, help="embedding size P; default 4")
    ap.add_argument(
        "--drop", type=int, action="append", default=[], help="a party that drops after setup"
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the embeddings and PBM noise")
    a = ap.parse_args(args)
    M, b, beta, P = a.parties, a.b, a.beta, a.dim
    check_int("parties", M, minimum=2)
    check_int("dim", P, minimum=1)
    check_pbm_params(b, beta)
    drop = sorted(set(a.drop))
    if any(not 0 <= d < M for d in drop):
        raise ConfigError(f"drop must name parties in [0, {M}), got {drop}")
    rng = np.random.default_rng(a.seed)
    bits = modulus_bits(b * M)
    server = SecAggServer(M, bits=bits)
    t = server.threshold
    print(
        f"M={M} parties, b={b}, beta={beta}, P={P}: sums lie in [0, {b * M}], so arithmetic "
        f"is mod 2^{bits} and each value travels as {bits} bits; threshold t={t} "
        f"(up to {M - t} parties may drop)\n"
    )
    parties = [SecAggParty(m, M, bits=bits) for m in range(M)]
    table = server.relay({p.index: p.public_key for p in parties})
    for p in parties:
        p.agree(table, server.session, server.public_key)
    print("setup: each party sent its X25519 public key (32 bytes) to the server, which relayed")
    print(f"       all keys, its own and session id {server.session.hex()[:16]}...; HKDF gives")
    print("       pair mask keys, pair channel keys (AES-GCM) and an HMAC key with the server\n")

    x = np.tanh(rng.normal(0, 1, size=(M, P)))
    msgs = {}
    nbytes = (P * bits + 7) // 8
    for m, p in enumerate(parties):
        q, _ = pbm_quantize(x[m], b=b, beta=beta, rng=rng)
        msg = p.mask(q, round_id=0, batch_id=0)
        masked = unpack_bits(msg[HEADER_BYTES : HEADER_BYTES + nbytes], bits, P)
        print(f"party {m}: embedding {np.array2string(x[m], precision=3)}")
        print(f"         PBM q       {q}")
        print(f"         sends       {masked}  (+ fresh self mask and pair masks mod 2^{bits})")
        print(
            f"         message     {len(msg)} bytes = {HEADER_BYTES}-byte header + {nbytes} "
            f"values + {M - 1} x {SHARE_RECORD_BYTES}-byte sealed shares + {TAG_BYTES}-byte "
            "HMAC tag" + ("   -- then drops out" if m in drop else "")
        )
        if m not in drop:
            msgs[m] = msg
    try:
        _demo_attacks(server, parties, msgs)
        checks = server.collect(msgs, round_id=0, batch_id=0, count=P)
        reqs = server.requests({v: parties[v].vouch(c) for v, c in checks.items()})
        answers = {v: parties[v].respond(r) for v, r in reqs.items()}
        q_hat = server.finish(answers)
    except SecAggAbort as exc:
        print(f"\nserver aborts: {exc}")
        return 0
    v0 = min(answers)
    print(
        f"\nunmasking: the server tells survivors {server.survivors} who dropped ({drop or 'none'})"
        f"; each answers with its shares of the survivors' self-mask seeds"
        + (
            " and the pair mask of this aggregation it shares with each dropped party"
            if drop
            else ""
        )
        + f" ({len(answers[v0])} bytes from party {v0})"
    )
    est = pbm_estimate_sum(q_hat, b=b, beta=beta, n_parties=len(server.survivors))
    alive = [m for m in range(M) if m not in drop]
    print(f"server recovers q_hat = {q_hat}  (sum over survivors mod 2^{bits})")
    print(f"estimate C/(beta b)(q_hat - b|S|/2) = {np.array2string(est, precision=3)}")
    true = np.array2string(x[alive].sum(axis=0), precision=3)
    print(f"true embedding sum of survivors     = {true}")
    return 0


def _demo_attacks(server: SecAggServer, parties: list[SecAggParty], msgs: dict) -> None:
    """Show that a tampered message aborts the round naming the party (then run it honestly)."""
    k = min(msgs)
    for what, bad in (
        ("a truncated message", msgs[k][:-1]),
        ("an integer instead of bytes", 12345),
        ("a flipped bit in the values", _flip(msgs[k], HEADER_BYTES)),
    ):
        try:
            server.collect({**msgs, k: bad}, round_id=0, batch_id=0, count=_count(server, msgs))
        except SecAggAbort as exc:
            print(f"\nattack: party {k} sends {what} -> {exc}")


def _count(server: SecAggServer, msgs: dict) -> int:
    return int.from_bytes(next(iter(msgs.values()))[HEADER_BYTES - 4 : HEADER_BYTES], "big")


def _flip(msg: bytes, at: int) -> bytes:
    return msg[:at] + bytes([msg[at] ^ 1]) + msg[at + 1 :]
