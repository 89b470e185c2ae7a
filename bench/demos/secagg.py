"""``securevfl demo secagg``: PBM + protocol-0 secure aggregation on a tiny example.

Prints each party's embedding and PBM values, the masked values the server receives (uniform
mod 2^r), the sum it recovers, and its estimate of the embedding sum.
"""

from __future__ import annotations

import argparse

import numpy as np

from protocols.secagg import (
    HEADER_BYTES,
    SecAggParty,
    SecAggServer,
    modulus_bits,
    unpack_bits,
)
from securevfl.errors import check_int
from securevfl.privacy.pbm import check_pbm_params, pbm_estimate_sum, pbm_quantize

NAME = "secagg"
HELP = "PBM values, masked values seen by the server, and the recovered sum (protocol 0)"


def main(args: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="securevfl demo secagg", description=HELP)
    ap.add_argument("--parties", type=int, default=3, help="data parties M >= 2; default 3")
    ap.add_argument("--b", type=int, default=8, help="PBM trials b; default 8")
    ap.add_argument("--beta", type=float, default=0.25, help="PBM beta in (0, 0.25]; default 0.25")
    ap.add_argument("--dim", type=int, default=4, help="embedding size P; default 4")
    ap.add_argument("--seed", type=int, default=0, help="seed of the embeddings and PBM noise")
    a = ap.parse_args(args)
    M, b, beta, P = a.parties, a.b, a.beta, a.dim
    check_int("parties", M, minimum=2)
    check_int("dim", P, minimum=1)
    check_pbm_params(b, beta)
    rng = np.random.default_rng(a.seed)
    bits = modulus_bits(b * M)
    print(
        f"M={M} parties, b={b}, beta={beta}, P={P}: sums lie in [0, {b * M}], "
        f"so arithmetic is mod 2^{bits} and each value travels as {bits} bits\n"
    )

    server = SecAggServer(M, bits=bits)
    parties = [SecAggParty(m, M, bits=bits) for m in range(M)]
    table = server.relay({p.index: p.public_key for p in parties})
    for p in parties:
        p.agree(table, server.session)
    print("setup: each party sent its X25519 public key (32 bytes) to the server, which relayed")
    print(f"       all keys and session id {server.session.hex()[:16]}...; pair keys via HKDF\n")

    x = np.tanh(rng.normal(0, 1, size=(M, P)))
    msgs = {}
    for m, p in enumerate(parties):
        q, _ = pbm_quantize(x[m], b=b, beta=beta, rng=rng)
        msgs[m] = p.mask(q, round_id=0, batch_id=0)
        nbytes = (P * bits + 7) // 8
        masked = unpack_bits(msgs[m][len(msgs[m]) - nbytes :], bits, P)
        print(f"party {m}: embedding {np.array2string(x[m], precision=3)}")
        print(f"         PBM q       {q}")
        print(
            f"         sends       {masked}  "
            f"({len(msgs[m])} bytes incl. {HEADER_BYTES}-byte header)"
        )
    q_hat = server.unmask(msgs, round_id=0, batch_id=0, count=P)
    est = pbm_estimate_sum(q_hat, b=b, beta=beta, n_parties=M)
    print(f"\nserver recovers q_hat = {q_hat}  (sum of the masked values mod 2^{bits})")
    print(f"estimate C/(beta b)(q_hat - bM/2) = {np.array2string(est, precision=3)}")
    print(f"true embedding sum                = {np.array2string(x.sum(axis=0), precision=3)}")
    return 0
