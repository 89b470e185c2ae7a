"""Training time per step with the unseeded CSPRNG noise vs seeded PCG64, per method.

    python -m bench.noise_overhead [--reps 5] [--methods hdp-vfl pbm-vfl ...]

Runs each method on breast alternately seeded and unseeded (same spec otherwise) and reports the
median training seconds per step (``time.train_s`` / steps; fm-vfl is one-shot: per fit).
"""

from __future__ import annotations

import argparse
import math
import statistics

from securevfl.context import RunSpec
from securevfl.experiment import run_experiment

SPECS = {
    "hdp-vfl": dict(parties=2, epochs=5, batch_size=64, epsilon=1.0, delta=1e-5),
    "pbm-vfl": dict(parties=3, epochs=3, batch_size=64, model="mlp"),
    "fm-vfl": dict(parties=2, epsilon=1.0),
    "dpsgd-c": dict(parties=2, epochs=5, batch_size=64, epsilon=1.0),
    "he-vfl": dict(parties=2, epochs=1, batch_size=64),
}


def steps(rec: dict, method: str) -> int:
    cfg = rec["config"]
    if method == "fm-vfl":
        return 1
    return cfg["epochs"] * math.ceil(rec["n_train"] / cfg["batch_size"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", nargs="+", default=list(SPECS))
    ap.add_argument("--dataset", default="breast")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--batch-size", type=int, help="override every method's batch size")
    a = ap.parse_args(argv)
    import baselines
    from securevfl.methods import load_all

    load_all()
    baselines.load_all()
    print("| method | steps | seeded PCG64 ms/step | unseeded CSPRNG ms/step | overhead |")
    print("|---|---|---|---|---|")
    for m in a.methods:
        times: dict[bool, list[float]] = {True: [], False: []}
        n = 0
        for rep in range(a.reps):
            for seeded in (True, False):
                kw = dict(SPECS[m])
                if a.batch_size:
                    kw["batch_size"] = a.batch_size
                spec = RunSpec(
                    method=m,
                    dataset=a.dataset,
                    seed=rep if seeded else None,
                    reproducible_noise=seeded,  # only the reproduction mode seeds DP noise
                    **kw,
                )
                rec = run_experiment(spec)
                assert rec["noise_generator"] == ("pcg64" if seeded else "aes-ctr-csprng")
                n = steps(rec, m)
                times[seeded].append(rec["time"]["train_s"] / n)
        s, u = statistics.median(times[True]), statistics.median(times[False])
        print(f"| {m} | {n} | {s * 1e3:.3f} | {u * 1e3:.3f} | {100 * (u / s - 1):+.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
