"""Peer for bench/he_epoch_bench.py, run in a SEPARATE venv (sf-heu 0.5.2b0 needs numpy < 2):
``python3 -m venv /tmp/heuenv && /tmp/heuenv/bin/pip install sf-heu==0.5.2b0 'numpy<2'``, then
``/tmp/heuenv/bin/python bench/peers/heu_vfl.py --scheme ou --blocks build/perf/he-adult``.
Not imported by securevfl; imports only numpy and heu.

The HE-VFL protocol of ``securevfl run he-vfl`` (baselines/he_vfl.py) on SecretFlow HEU's
numpy API, every party in this one process, in turn, as our in-process run: the coordinator C
generates the key pair and ships the public key (setup, not timed); per minibatch
  1. passive party 1 encrypts u_1 = X_1 w_1 (fixed point 2^32) and sends it to party 0;
  2. party 0 adds its plain part X_0 w_0 + b - 2y: the Taylor residual [[4d]], sent to party 1;
  3. each party k forms [[X_k^T 4d + R_k]] (X_k at 2^16, party 0 with a column of ones for the
     bias; HEU's plaintext-ciphertext matmul), R_k a mask only k knows, and sends it to C;
  4. C decrypts and returns the masked integers to k alone;
  5. k subtracts R_k, divides by 2^48 * 4b and takes the gradient step.
The blocks (features, labels in {-1, +1}, minibatch order, learning rate) are the ones our run
wrote with ``python -m bench.he_epoch_bench --dump-blocks DIR``. Timed: the epoch loop (steps
1-5 for every minibatch, serialization included), as our side times it. The last stdout line is
the perf interface's JSON object; ``exact``: every opened gradient equals the plaintext one of
the same fixed-point inputs within the rounding of the fixed point.
"""

import argparse
import json
import os
import secrets
import sys
import time

import numpy as np

U_FRAC_BITS, X_FRAC_BITS = 32, 16  # as baselines/he_schemes.py
MASK_BITS = 48 + 64 + 40  # masks R: the result's bits (|X^T 4d| < 2^112) + 40 statistical bits


def peak_mb() -> float:
    """Peak resident memory of this process (VmHWM), MiB, as our side measures it."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def fixed(v: np.ndarray, bits: int) -> np.ndarray:
    return np.rint(np.asarray(v, dtype=np.float64) * 2.0**bits).astype(np.int64)


def run(scheme: str, blocks: str, batches: int, key_bits: int) -> dict:
    from heu import numpy as hnp
    from heu import phe

    schema = {"ou": phe.SchemaType.OU, "zpaillier": phe.SchemaType.ZPaillier}[scheme]
    z = np.load(os.path.join(blocks, "blocks.npz"), allow_pickle=False)
    X = {0: np.hstack([z["X0"], np.ones((len(z["X0"]), 1))]), 1: z["X1"]}
    y, order, b_size, lr = z["y"], z["order"], int(z["batch_size"]), float(z["lr"])
    n = len(y)
    idxs = [order[s : s + b_size] for s in range(0, n, b_size)]
    if batches:
        idxs = idxs[:batches]
    # ---- setup (not timed): keys at C, the public key to both data parties
    t_setup = time.perf_counter()
    kit_c = hnp.setup(schema, key_bits)
    pk_bytes = kit_c.public_key().serialize()
    kits = {k: hnp.setup(phe.PublicKey.load_from(pk_bytes)) for k in (0, 1)}
    setup_s = time.perf_counter() - t_setup
    w = {0: np.zeros(X[0].shape[1]), 1: np.zeros(X[1].shape[1])}  # w[0][-1]: party 0's bias
    sent = {"ir": 0, "residual": 0, "gradient": 0, "opened": 0}
    max_err, decoder, checks = 0.0, phe.BigintDecoder(), []
    t0, c0 = time.perf_counter(), time.process_time()
    for idx in idxs:
        bsz = len(idx)
        # 1. party 1: [[u_1]] to party 0
        k1 = kits[1]
        u1 = X[1][idx] @ w[1]
        msg = k1.encryptor().encrypt(k1.array(fixed(u1, U_FRAC_BITS))).serialize()
        sent["ir"] += len(msg)
        # 2. party 0: [[4d]] = [[u_1]] + X_0 w_0 + b - 2y, to party 1
        k0 = kits[0]
        plain = X[0][idx] @ w[0] - 2.0 * y[idx]
        d_ct = k0.evaluator().add(
            hnp.CiphertextArray.load_from(msg), k0.array(fixed(plain, U_FRAC_BITS))
        )
        d_msg = d_ct.serialize()
        sent["residual"] += len(d_msg)
        d_fixed = fixed(u1, U_FRAC_BITS) + fixed(plain, U_FRAC_BITS)  # for the check only
        # 3-5. each party: masked [[X^T 4d + R]] to C, C decrypts, k unmasks and steps
        for k in (0, 1):
            kk = kits[k]
            d_k = d_ct if k == 0 else hnp.CiphertextArray.load_from(d_msg)
            xt = fixed(X[k][idx].T, X_FRAC_BITS)
            prod = kk.evaluator().matmul(kk.array(xt), d_k)
            masks = np.array([secrets.randbits(MASK_BITS) for _ in range(xt.shape[0])], object)
            g_msg = kk.evaluator().add(prod, kk.array(masks)).serialize()
            sent["gradient"] += len(g_msg)
            # C: decrypt, back to k
            opened = kit_c.decryptor().decrypt(hnp.CiphertextArray.load_from(g_msg))
            o_msg = opened.serialize()
            sent["opened"] += len(o_msg)
            got = hnp.PlaintextArray.load_from(o_msg).to_numpy(decoder).ravel() - masks
            g = np.array([float(v) for v in got]) / 2.0 ** (U_FRAC_BITS + X_FRAC_BITS) / (4 * bsz)
            checks.append((g, xt, d_fixed, bsz))  # compared after the clock stops
            w[k] = w[k] - lr * g
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    for g, xt, d_fixed, bsz in checks:  # exact integers: the plaintext of the same fixed point
        want = (xt.astype(object).dot(d_fixed.astype(object))).astype(float)
        want = want / 2.0 ** (U_FRAC_BITS + X_FRAC_BITS) / (4 * bsz)
        max_err = max(max_err, float(np.max(np.abs(g - want))))
    from importlib.metadata import version

    return {
        "seconds": seconds,
        "peak_mb": peak_mb(),
        "bytes": int(sum(sent.values())),
        "version": f"sf-heu {version('sf-heu')}",
        "exact": bool(max_err < 1e-9),
        "detail": {
            "scheme": f"{scheme} {key_bits}-bit",
            "batches": len(idxs),
            "batch_size": b_size,
            "features_per_party": [int(X[0].shape[1]) - 1, int(X[1].shape[1])],
            "cpu_s": round(cpu, 3),
            "setup_s": round(setup_s, 3),
            "phases_bytes": sent,
            "max_abs_error": max_err,
            "fixed_point": {"u_frac_bits": U_FRAC_BITS, "x_frac_bits": X_FRAC_BITS},
            "runtime": "one process: the 3 parties in turn; HEU's own thread pool",
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scheme", choices=("ou", "zpaillier"), default="ou")
    ap.add_argument("--blocks", default="build/perf/he-adult", help="dir of blocks.npz")
    ap.add_argument("--batches", type=int, default=0, help="minibatches to run (0: the epoch)")
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    a = ap.parse_args()
    if not os.path.isfile(os.path.join(a.blocks, "blocks.npz")):
        print(
            f"--blocks must hold blocks.npz (write it with python -m bench.he_epoch_bench "
            f"--dump-blocks {a.blocks}), got {a.blocks!r}",
            file=sys.stderr,
        )
        return 2
    out = run(a.scheme, a.blocks, a.batches, a.key_bits)
    if not a.json:
        print(f"{a.scheme}: {out['seconds']:.3f} s, exact={out['exact']}", file=sys.stderr)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
