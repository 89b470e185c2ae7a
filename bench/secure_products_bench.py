"""The secure-product job alone, for side-by-side runs with a peer (bench/peers/spu_block.py):
[1, X_0]ᵀX_1 + N (21 x 20), 3 MPyC parties (fresh processes per run), opened to party 2.

    python -m bench.secure_products_bench --impl rns --n 10000,100000 [--reps 3]
    python -m bench.secure_products_bench --n 100000 --json

Prints per run: exactness against the plaintext integer product, the slowest party's secure
seconds, each party's CPU seconds, seconds per phase, payload bytes per phase, peak memory.
With ``--json`` (one n, one run): the last stdout line is the perf-job JSON object
(bench/suites/perf.d/): seconds = the slowest party's secure phase, peak_mb = the largest
party's peak RSS, bytes = every payload byte the parties sent (metered by our runtime).

``--as-run`` times the same product where a user meets it: ``securevfl run fm-vfl --processes``
on two parties' Parquet sources of n / 0.8 rows (bench/scale_parquet.py, 20 columns a party; the
run's 80 % training split gives the product's n rows, M_0 = [v | 1 | X_0] 22 x 20), and reports
the run record's secure phase (``extra.mpc``: the slowest party's seconds, each party's CPU,
phases and peak) and the bytes of its ``mpc`` phase; ``exact`` is null (the opened product is
noised inside the method, not returned).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from protocols import shamir_launch as sl
from protocols import shamir_products as sp


def run_once(n: int, impl: str, rng: np.random.Generator) -> dict:
    f, bound = 16, 1e4
    X0 = np.hstack([np.ones((n, 1)), rng.uniform(-1, 1, (n, 20))])
    M = {0: sp.encode_fixed(X0, f), 1: sp.encode_fixed(rng.uniform(-1, 1, (n, 20)), f)}
    noises = {0: rng.laplace(0, 5.0, (21, 20))}
    t = time.perf_counter()
    got, st = sl.run_block_products(
        M,
        noises,
        [sp.Pair(0, 1, 0)],
        n_parties=3,
        receiver=2,
        frac_bits=f,
        noise_bound=bound,
        impl=impl,
        timeout=900,
        n_max=max(n, sp.MAX_ROWS),
    )
    wall = time.perf_counter() - t
    # |entries| <= 2**16, so the int64 product is exact for n < 2**31
    exact = bool((got[0] == M[0].T @ M[1] + sp.encode_noise(noises[0], f, bound)).all())
    return {
        "seconds": max(st.secure_s.values()),
        "peak_mb": max(st.peak_rss_mb.values()),
        "bytes": sum(st.phases_bytes().values()),
        "version": version(),
        "exact": exact,
        "detail": {
            "n": n,
            "impl": impl,
            "phases_s": {k: {p: round(s, 4) for p, s in v.items()} for k, v in st.phases_s.items()},
            "phases_bytes": st.phases_bytes(),
            "cpu_s": {k: round(v, 3) for k, v in st.cpu_s.items()},
            "peak_mb": {k: round(v, 1) for k, v in st.peak_rss_mb.items()},
            "wall_s": round(wall, 3),
            "parties": 3,
            "threshold": 1,
        },
    }


def run_as_run(n: int, where: str) -> dict:
    """fm-vfl end to end with one OS process per party on n training rows (see the module
    docstring); the data are written under ``where`` once and reused by later runs."""
    import subprocess  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    from bench.scale_parquet import write_parties  # noqa: PLC0415

    rows = round(n / 0.8)
    src = Path(where) / f"fm-{rows}"
    if not (src / "done").is_file():
        write_parties(src, rows)
        (src / "done").write_text("")
    cmd = [sys.executable, "-m", "bench.cli", "run", "fm-vfl", "--dataset"]
    cmd += [f"parquet:{src / 'p0'},{src / 'p1'}", "--epsilon", "1", "--seed", "0"]
    cmd += ["--processes", "--engine", "numpy", "--json"]
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t
    if out.returncode:
        raise SystemExit(f"fm-vfl run failed ({out.returncode}): {out.stderr.strip()[-400:]}")
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    m = rec["extra"]["mpc"]
    return {
        "seconds": max(m["secure_s"].values()),
        "peak_mb": max(m["peak_rss_mb"].values()),
        "bytes": rec["comm"]["by_phase"]["mpc"]["bytes"],
        "version": version(),
        "exact": None,
        "detail": {
            "n": rec["n_train"],
            "as_run": " ".join(cmd[1:]),
            "phases_s": m["phases_s"],
            "cpu_s": {k: round(v, 3) for k, v in m["cpu_s"].items()},
            "peak_mb": {k: round(v, 1) for k, v in m["peak_rss_mb"].items()},
            "entry_spread_s": m.get("entry_spread_s"),
            "wall_s": round(wall, 3),
            "accuracy": rec["metrics"].get("accuracy"),
            "parties": 3,
        },
    }


def version() -> str:
    """Our library and the MPyC transport it runs on."""
    from importlib.metadata import version as dist_version  # noqa: PLC0415

    from securevfl.version import __version__  # noqa: PLC0415

    # not `import mpyc`: importing its runtime parses this process's sys.argv
    return f"securevfl {__version__} (MPyC {dist_version('mpyc')})"


def text(rec: dict) -> str:
    """The old one-line text form of a run."""
    d = rec["detail"]
    return (
        f"{d.get('impl', 'as run')} n={d['n']} exact={rec['exact']} "
        f"slowest_secure_s={rec['seconds']:.3f} "
        f"cpu_s={d['cpu_s']} wall_s={d['wall_s']:.2f} phases_s={d['phases_s']} "
        f"phases_bytes={d.get('phases_bytes', rec['bytes'])} "
        f"peak_mb={ {k: round(v) for k, v in d['peak_mb'].items()} }"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.secure_products_bench")
    ap.add_argument("--impl", default="rns", choices=sp.IMPLS)
    ap.add_argument("--n", default="10000,100000", help="comma-separated row counts")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="one run; last line: the perf-job JSON")
    ap.add_argument(
        "--as-run",
        action="store_true",
        help="time the product inside `securevfl run fm-vfl --processes` (n training rows)",
    )
    ap.add_argument(
        "--data-dir",
        default="build/perf/fm-as-run",
        help="with --as-run: where the generated Parquet sources are kept (reused)",
    )
    a = ap.parse_args(argv)
    try:
        ns = [int(v) for v in a.n.split(",")]
    except ValueError:
        ns = []
    if not ns or min(ns) < 1:
        print(f"--n must be comma-separated positive integers, got {a.n!r}", file=sys.stderr)
        return 2
    if a.json and (len(ns) != 1 or a.reps != 1):
        print(f"--json runs one n once, got --n {a.n!r} --reps {a.reps}", file=sys.stderr)
        return 2
    rng = np.random.default_rng(0)
    for n in ns:
        for _ in range(a.reps):
            rec = run_as_run(n, a.data_dir) if a.as_run else run_once(n, a.impl, rng)
            print(json.dumps(rec) if a.json else text(rec), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
