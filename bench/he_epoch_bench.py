"""One HE-VFL training epoch, timed beside SecretFlow HEU (bench/peers/heu_vfl.py).

    python -m bench.he_epoch_bench --scheme ckks --dataset adult --json
    python -m bench.he_epoch_bench --scheme ckks --processes --json
    python -m bench.he_epoch_bench --scheme paillier --batches 4 --dump-blocks build/perf/he-adult

The run is the method's own, K = 2 data parties and the coordinator: ``securevfl run he-vfl``
(in-process runtime, every party in this process, one thread), or with ``--processes``
``securevfl run he-vfl --processes`` (one OS process per party over MPyC's networked runtime,
how a user deploys it). The timed quantity is the first epoch's wall time as the method's hooks
clock it (at the label holder: the trainer's loop: IRs, encryption, the residual, masked
products, decryption, unmasking, updates; not key generation, not scoring).
With ``--batches N`` only the epoch's first N minibatches run (``timed_batches``), and the peer
runs the same N. Every opened gradient is checked against the plaintext ``X^T (4d) / 4b`` of the
same minibatch (``exact``: within 2^-20 for CKKS, the fixed-point bound for Paillier):
in-process as each message is unmasked; with ``--processes`` after the run, from the plain
values each party process kept locally (:mod:`bench.he_epoch_record`; nothing extra is sent).
``--dump-blocks DIR`` writes the blocks the peer needs (features, labels, minibatch order,
learning rate) to ``DIR/blocks.npz`` (in-process before the timed epoch, else after the run).
The last stdout line is the perf interface's JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any

import numpy as np

from baselines import he_schemes
from baselines.he_schemes import U_FRAC_BITS, X_FRAC_BITS
from bench.he_epoch_record import RECORD_ENV, block_parts, blocks, verify
from bench.plugins import load_plugins, plugin_modules
from protocols.ckks_packed import GRAD_ERROR_BITS
from securevfl.errors import SecureVFLError
from securevfl.experiment import run_experiment, run_in_processes
from securevfl.run_options import build_spec
from securevfl.runtime.resources import peak_rss_bytes


def checked(base: type) -> type:
    """``base`` scheme that also compares every unmasked gradient with the plaintext one.

    In-process every party lives here, so the plain IRs and residual are at hand; the check adds
    one small numpy product per message (no cryptography, no extra transfer).
    """

    class Checked(base):  # type: ignore[misc, valid-type]
        dump_dir: str | None = None
        last: Any = None  # the instance the run made (the bench reads its checks)

        def setup(self) -> None:
            type(self).last = self
            self.irs: dict[int, np.ndarray] = {}
            self.want: dict[int, np.ndarray] = {}
            self.max_err, self.tol, self.checked = 0.0, float("inf"), 0
            if self.dump_dir:
                dump_blocks(self.ctx, self.dump_dir)
            super().setup()

        def encrypt_ir(self, k, v):
            self.irs[k] = np.asarray(v, dtype=np.float64)
            return super().encrypt_ir(k, v)

        def combine(self, k, payloads, plain):
            self.d = np.asarray(plain, dtype=np.float64) + sum(self.irs.values())
            return super().combine(k, payloads, plain)

        def gradient_message(self, k, d_payload, X, rng):
            self.want[k] = (X.T @ self.d) / (4.0 * X.shape[0])
            self.tol = tolerance(self.name, self.d, X.shape[0])
            return super().gradient_message(k, d_payload, X, rng)

        def unmask(self, k, opened, mask):
            g = super().unmask(k, opened, mask)
            err = float(np.max(np.abs(g / (4.0 * len(self.d)) - self.want[k]), initial=0.0))
            self.max_err = max(self.max_err, err / max(self.tol, 1e-300))
            self.checked += 1
            return g

    Checked.__name__ = f"Checked{base.__name__}"
    return Checked


def tolerance(scheme: str, d: np.ndarray, b: int) -> float:
    """Largest error of one gradient entry the scheme states: CKKS's validated 2^-20; Paillier's
    fixed point (x at 2^-X_FRAC_BITS, d at 2^-U_FRAC_BITS, both rounded to nearest)."""
    if scheme == "ckks":
        return 2.0**-GRAD_ERROR_BITS
    dmax = float(np.max(np.abs(d), initial=0.0))
    return (2.0 ** -(X_FRAC_BITS + 1) * dmax + 2.0 ** -(U_FRAC_BITS - 1)) / 4.0 + 1e-12


def dump_blocks(ctx: Any, out_dir: str) -> str:
    """The peer's inputs: each party's training block, labels in {-1, +1}, the epoch's order."""
    return write_blocks(out_dir, block_parts(ctx, 0) | block_parts(ctx, 1))


def write_blocks(out_dir: str, arrays: dict[str, np.ndarray]) -> str:
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "blocks.npz")
    np.savez(path, **arrays)
    return path


def run_processes(a: argparse.Namespace, spec: Any) -> tuple[dict, int, float, float]:
    """One OS process per party, as ``securevfl run he-vfl --processes``; every opened gradient
    is checked after the run from what each party recorded locally (bench.he_epoch_record).
    Returns (record, gradients checked, largest error / tolerance, peak RSS of a party, MiB)."""
    with tempfile.TemporaryDirectory(prefix="he-epoch-") as tmp:
        os.environ[RECORD_ENV] = tmp
        try:
            rec = run_in_processes(spec, plugins=(*plugin_modules(), "bench.he_epoch_record"))
        finally:
            os.environ.pop(RECORD_ENV, None)
        checked, worst = verify(tmp, 2, lambda d, b: tolerance(a.scheme, d, b))
        if a.dump_blocks:
            write_blocks(a.dump_blocks, blocks(tmp, 2))
    peak = max(rec["stats"]["peak_rss_bytes"].values()) / 2**20
    return rec, checked, worst, peak


def run(a: argparse.Namespace) -> dict[str, Any]:
    params: dict[str, Any] = {
        "method": "he-vfl",
        "scheme": a.scheme,
        "dataset": a.dataset,
        "parties": 2,
        "batch_size": a.batch_size,
        "epochs": 1,
        "seed": a.seed,
        "timed_batches": a.batches,
    }
    if a.scheme == "paillier":
        params["paillier_randomness"] = a.randomness
        params["paillier_bits"] = a.key_bits
    load_plugins()
    spec = build_spec(params)
    if a.processes:
        rec, n_checked, worst, peak = run_processes(a, spec)
        runtime = "one OS process per party (3, MPyC networked runtime over loopback)"
        return record(a, rec, n_checked, worst, peak, runtime)
    base = he_schemes.SCHEMES[a.scheme]
    cls = checked(base)
    cls.dump_dir = a.dump_blocks
    # the method looks its scheme up by name: the checked subclass runs the same code
    he_schemes.SCHEMES[a.scheme] = cls
    try:
        rec = run_experiment(spec)
    finally:
        he_schemes.SCHEMES[a.scheme] = base
    assert rec is not None  # in-process: this process holds the label
    scheme = cls.last
    runtime = "in-process: all 3 parties in this one process, one thread"
    peak = peak_rss_bytes() / 2**20
    return record(a, rec, scheme.checked, scheme.max_err, peak, runtime)


def record(a, rec: dict, checked: int, worst: float, peak: float, runtime: str) -> dict:
    """The perf interface's JSON object of a run's record and its exactness check."""
    e = rec["extra"]
    detail: dict[str, Any] = {
        "batches": e["batches_run_per_epoch"],
        "batches_per_epoch": e["batches_per_epoch"],
        "batch_size": a.batch_size,
        "features_per_party": rec["features_per_party"],
        "n_train": rec["n_train"],
        "epoch_cpu_s": e["epoch_cpu_s"][0],
        "phases_s": e["phases_s"],
        "phases_bytes": e["phases_bytes"],  # what the label holder's process sent
        "setup_s": e["setup_s"],
        "gradients_checked": checked,
        "max_error_over_tolerance": worst,
        "runtime": runtime,
    }
    if a.scheme == "ckks":
        detail["ckks"] = e["ckks"] | {"security": "128-bit classical (HE standard, SEAL TC128)"}
    else:
        assumption = "DCR + DJN short exponent" if a.randomness == "djn" else "DCR (textbook)"
        detail["paillier"] = e["paillier"] | {"assumption": assumption}
    version = f"securevfl {rec['version']} ({versions(a.scheme)})"
    return {
        "seconds": float(e["epoch_s"][0]),
        "peak_mb": peak,
        # every party's training messages (the label holder's record merges their meters)
        "bytes": int(rec["comm"]["by_phase"]["train"]["bytes"]),
        "version": version,
        "exact": bool(checked > 0 and worst <= 1.0),
        "detail": detail,
    }


def versions(scheme: str) -> str:
    from importlib.metadata import version  # noqa: PLC0415

    if scheme == "ckks":
        return f"tenseal {version('tenseal')}, SEAL"
    return f"phe {version('phe')}, gmpy2 {version('gmpy2')}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.he_epoch_bench", description=__doc__)
    ap.add_argument("--scheme", choices=("ckks", "paillier"), default="ckks")
    ap.add_argument("--dataset", default="adult")
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=0, help="minibatches to run (0: the epoch)")
    ap.add_argument("--randomness", choices=("full", "djn"), default="djn")
    ap.add_argument("--key-bits", type=int, default=2048, help="Paillier modulus bits")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dump-blocks", default=None, metavar="DIR")
    ap.add_argument(
        "--processes",
        action="store_true",
        help="one OS process per party (securevfl run --processes), not all in this one",
    )
    ap.add_argument("--json", action="store_true", help="print only the JSON line")
    a = ap.parse_args(argv)
    if a.batches < 0 or a.batch_size < 1:
        print(
            f"error: --batches must be >= 0 and --batch-size >= 1, got {a.batches} and "
            f"{a.batch_size}",
            file=sys.stderr,
        )
        return 2
    try:
        out = run(a)
    except SecureVFLError as exc:  # bad dataset, option or parameter: one line, exit 2
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not a.json:
        d = out["detail"]
        print(
            f"{a.scheme}: {out['seconds']:.3f} s (cpu {d['epoch_cpu_s']:.3f} s), "
            f"exact={out['exact']}, phases={d['phases_s']}"
        )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
