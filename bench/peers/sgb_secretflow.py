"""Peer side of the SecureBoost perf job: SecretFlow's SGB (its vertical SecureBoost) on the rows
that ``python -m bench.secureboost_bench --dump-blocks DIR`` wrote, split as the run split them
(party 'alice' holds the labels and the label holder's columns, 'bob' the partner's), with the
run's depth, rounds, learning rate, λ = 1, about as many bins (``sketch_eps`` = 1 / bins; SGB's
are quantile bins, ours equal-width on the public domain), the same base margin (the log-odds of
the training labels' mean) and every tree on both parties' columns.
Paillier-2048 (``--schema``), SecretFlow's debug mode (every party in this one process).
Seconds = ``Sgb.train``; accuracy at the 0.5 threshold on the test rows.

Runs in its own environment, never securevfl's (secretflow pins numpy 1.x, pandas 1.5.3 and
development builds that the index lacks): secretflow 1.14.0b0 installed with ``--no-deps`` beside
the released spu 0.9.5 and sf-heu 0.5.2b0 and its other pinned requirements (docs/benchmarks.md,
"SecureBoost"). **Shim:** secretflow 1.14.0b0 calls ``spu.logging.LogOptions``; spu 0.9.5 ships
the same class as ``spu.libspu.logging`` but no longer re-exports it as ``spu.logging``. This
script sets that one module attribute before importing secretflow (nothing else is patched and
nothing is installed: the alias exists only in this process). The last stdout line is the perf
interface's JSON object.

The environment, as made for docs/benchmarks.md (Python 3.11; ``pip install`` into it)::

    python3.11 -m venv /tmp/sgb-venv  # any path; the figures came from this one
    pip install --no-deps secretflow==1.14.0b0 sf-sml==0.1.0.dev20250623
    pip install spu==0.9.5 sf-heu==0.5.2b0 "numpy<2" pandas==1.5.3 scikit-learn==1.5.2 \
        duckdb==1.0.0 sqlglot==25.5.1 pyarrow==14.0.2 "protobuf<5" multiprocess==0.70.18 \
        jax==0.4.34 jaxlib==0.4.34 secretflow-spec==1.1.0b0 kuscia==0.0.3b0 sdc-apis sdc-sdk \
        secretflow-dataproxy==0.5.0b0 secretflow-serving-lib==0.10.0.dev20250414 s3fs \
        aiobotocore grpcio ray click requests

(sqlglot, duckdb, pandas and scikit-learn must be secretflow's pins: newer ones break its
import. jax 0.4.34 is spu 0.9.5's ceiling; secretflow asks for <= 0.4.26.)
"""

import argparse
import importlib.metadata
import json
import os
import sys
import time

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--blocks", required=True, help="directory holding blocks.npz")
    ap.add_argument("--schema", default="paillier", choices=("paillier", "ou", "zpaillier"),
                    help="HEU scheme; default paillier (securevfl's)")  # fmt: skip
    ap.add_argument("--key-bits", type=int, default=2048, help="HE key bits; default 2048")
    ap.add_argument("--json", action="store_true", help="only the JSON line on stdout")
    a = ap.parse_args()
    path = os.path.join(a.blocks, "blocks.npz")
    if not os.path.isfile(path):
        print(f"--blocks must hold blocks.npz, got {a.blocks!r}", file=sys.stderr)
        return 2
    with np.load(path, allow_pickle=False) as b:
        trees, depth, bins = (int(v) for v in b["settings"])
        lr = float(b["lr"][0])
        own = int(b["own_columns"][0])
        Xtr, ytr, Xte, yte = b["X_train"], b["y_train"], b["X_test"], b["y_test"]

    import spu
    import spu.libspu

    spu.logging = spu.libspu.logging  # the shim (module docstring)
    import secretflow as sf
    from secretflow.data import FedNdarray, PartitionWay
    from secretflow.device.driver import reveal
    from secretflow.ml.boost.sgb_v import Sgb

    # debug mode: every party in this process (secretflow 1.14 moved its Ray simulation mode to
    # the separate secretflow_fl package, 'sfl', which is not on the index)
    sf.init(parties=["alice", "bob"], debug_mode=True)
    alice, bob = sf.PYU("alice"), sf.PYU("bob")

    def fed(X: np.ndarray) -> FedNdarray:
        return FedNdarray(
            partitions={alice: alice(lambda: X[:, :own])(), bob: bob(lambda: X[:, own:])()},
            partition_way=PartitionWay.VERTICAL,
        )

    y = FedNdarray(
        partitions={alice: alice(lambda: ytr.astype(np.float32).reshape(-1, 1))()},
        partition_way=PartitionWay.VERTICAL,
    )
    heu_config = {
        "sk_keeper": {"party": "alice"},
        "evaluators": [{"party": "bob"}],
        "mode": "PHEU",
        "he_parameters": {"schema": a.schema, "key_pair": {"generate": {"bit_size": a.key_bits}}},
        "encoding": {
            "cleartext_type": "DT_I32",
            "encoder": "IntegerEncoder",
            "encoder_args": {"scale": 1},
        },
    }
    heu = sf.HEU(heu_config, spu.libspu.FieldType.FM128)
    params = {
        "num_boost_round": trees,
        "max_depth": depth,
        "learning_rate": lr,
        "reg_lambda": 1.0,
        "gamma": 0.0,
        "sketch_eps": 1.0 / bins,
        "objective": "logistic",
        "rowsample_by_tree": 1.0,
        "colsample_by_tree": 1.0,
        # SGB starts from base_score as a margin (init_pred fills it in): the log-odds of the
        # training labels' mean, as ours (it used to get the mean itself, a probability)
        "base_score": float(np.log(np.mean(ytr) / (1.0 - np.mean(ytr)))),
        # 1.14's default is True (its docstring says False): the first tree on alice's columns
        # alone, which ours does only with --local-trees 1; every tree on both, as ours
        "first_tree_with_label_holder_feature": False,
        "seed": 0,
    }
    dtrain = fed(Xtr)
    t0, cpu0 = time.perf_counter(), time.process_time()
    model = Sgb(heu).train(params, dtrain, y)
    seconds, cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    print(f"SGB trained in {seconds:.3f} s", file=sys.stderr)
    pred = model.predict(fed(Xte), alice)
    if isinstance(pred, FedNdarray):  # debug mode hands back the federated array
        pred = pred.partitions[alice]
    p = np.asarray(reveal(pred)).ravel()
    acc = float(np.mean((p >= 0.5).astype(int) == yte))
    sf.shutdown()
    out = {
        "seconds": seconds,
        "version": f"secretflow {importlib.metadata.version('secretflow')} "
        f"(spu {importlib.metadata.version('spu')}, sf-heu {importlib.metadata.version('sf-heu')})",
        "detail": {
            "accuracy": acc,
            "schema": a.schema,
            "key_bits": a.key_bits,
            "encrypted": True,
            "cpu_s": cpu_s,  # this process's CPU (every thread) in Sgb.train
            "shim": "spu.logging = spu.libspu.logging",
        },  # fmt: skip
    }
    if not a.json:
        print(f"SGB: {seconds:.3f} s, accuracy {acc:.4f}", file=sys.stderr)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
