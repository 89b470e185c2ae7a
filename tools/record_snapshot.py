"""Snapshot seeded records of every method, or compare two snapshots (refactor safety net).

    python tools/record_snapshot.py save OUT.json      # run every method, seeded, small
    python tools/record_snapshot.py diff A.json B.json # exit 1 if a compared field differs

Compared: metrics, bytes and messages, ε and its report, model fingerprints. Not compared: times,
timestamps, versions, config layout, statistics (they move with the machine or the record shape).
CKKS runs are compared on metrics to 1e-3 (its noise), never on fingerprints. Byte counts are
compared to 1%: MPyC's random shares and CKKS ciphertexts serialize to slightly varying lengths.
"""

from __future__ import annotations

import json
import sys
from typing import Any

CASES: list[dict[str, Any]] = [
    dict(method="vfl", epochs=2),
    dict(method="vfl", model="mlp", epochs=2),
    dict(method="local", epochs=2),
    dict(method="centralized", epochs=2),
    dict(method="hdp-vfl", epsilon=4.0, epochs=3),
    dict(method="hdp-vfl", epsilon=4.0, epochs=3, center=True, options={"intercept": "free"}),
    dict(method="fm-vfl", epsilon=1.0),
    dict(method="fm-central", epsilon=1.0),
    dict(method="pbm-vfl", model="mlp", epochs=2, options={"b": 16}),
    dict(method="ldp-vfl", model="mlp", epsilon=4.0, epochs=2),
    dict(method="npq", model="mlp", epochs=2),
    dict(method="afe-vfl", model="mlp", epsilon=4.0, epochs=2),
    dict(method="dpsgd-c", epsilon=4.0, epochs=2),
    dict(method="he-vfl", epochs=1, options={"scheme": "ckks"}),
    # trainers branch: the eval paths, threshold, tuning and the split-NN variants
    dict(method="hdp-vfl", epsilon=4.0, epochs=3, options={"eval": "plain"}),
    dict(
        method="hdp-vfl",
        epsilon=4.0,
        epochs=3,
        center=True,
        options={"intercept": "free", "threshold": "deconvolved"},
    ),
    dict(method="hdp-vfl", epsilon=4.0, epochs=2, options={"tune": True}),
    dict(method="pbm-vfl", model="mlp", epochs=2, options={"b": 16, "eval": "plain"}),
    dict(method="pbm-vfl", model="mlp", epsilon=8.0, epochs=1, options={"b": 16}),
    dict(method="npq", model="mlp", epochs=2),
    dict(method="ldp-vfl", model="mlp", epochs=2, options={"eval": "plain"}),
    dict(method="afe-vfl", model="mlp", epsilon=4.0, epochs=2, options={"variant": "full"}),
    dict(method="afe-vfl", model="mlp", epsilon=4.0, epochs=2, aggregation="concat"),
    dict(method="vfl", model="mlp", epochs=2, aggregation="concat"),
    dict(method="local", model="mlp", epochs=2),
    dict(method="centralized", model="mlp", epochs=2),
    dict(method="afe-vfl", model="mlp", epsilon=4.0, epochs=2, options={"variant": "vanilla"}),
    dict(method="afe-vfl", model="mlp", epsilon=4.0, epochs=2, options={"variant": "r"}),
    dict(method="vfl", dataset="diabetes", epochs=2),
    dict(method="vfl", dataset="diabetes", model="mlp", epochs=2),
    dict(method="hdp-vfl", dataset="diabetes", epsilon=4.0, epochs=2),
    dict(method="ldp-vfl", dataset="diabetes", model="mlp", epsilon=4.0, epochs=2),
]
SKIP = {
    "time",
    "timestamp",
    "version",
    "config",
    "stats",
    "extra",
    "runtime",
    "family",
    "capabilities",
}


def save(path: str) -> None:
    import baselines
    from securevfl import RunSpec, run_experiment

    baselines.load_all()

    out = []
    for case in CASES:
        spec = RunSpec(**{"dataset": "breast", "parties": 2, "seed": 3, "delta": 1e-5, **case})
        try:
            rec = run_experiment(spec)
        except Exception as e:  # a case a branch no longer accepts is reported, not fatal
            rec = {"error": f"{type(e).__name__}: {e}"}
        out.append({"case": case, "record": rec})
        print(case["method"], "ok" if "error" not in rec else rec["error"], flush=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True, default=str)


def _rounded_bytes(x: Any) -> Any:
    """Byte counts to two significant digits (see the module docstring); other values unchanged."""
    if isinstance(x, dict):
        return {k: _rounded_bytes(v) for k, v in x.items()}
    if isinstance(x, int) and not isinstance(x, bool) and x > 100:
        return float(f"{x:.2g}")
    return x


def _strip(rec: dict[str, Any], ckks: bool) -> dict[str, Any]:
    r = {k: v for k, v in rec.items() if k not in SKIP}
    if "comm" in r:
        r["comm"] = _rounded_bytes(r["comm"])
    if ckks:
        r.pop("model_fingerprint", None)
        r["metrics"] = {k: round(v, 3) for k, v in r.get("metrics", {}).items()}
    return r


def diff(a: str, b: str) -> int:
    A, B = json.load(open(a)), json.load(open(b))
    # cases are matched by their spec, so a snapshot with more cases compares on the shared ones
    key = lambda entry: json.dumps(entry["case"], sort_keys=True)
    in_b = {key(y): y for y in B}
    bad = 0
    for x in A:
        y = in_b.get(key(x))
        if y is None:
            print(x["case"]["method"], "only in", a)
            continue
        ckks = x["case"].get("options", {}).get("scheme") == "ckks"
        ra, rb = _strip(x["record"], ckks), _strip(y["record"], ckks)
        keys = sorted(set(ra) | set(rb))
        diffs = [k for k in keys if ra.get(k) != rb.get(k)]
        print(x["case"]["method"], "same" if not diffs else f"DIFFERS in {diffs}")
        bad += bool(diffs)
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "save":
        save(sys.argv[2])
    else:
        sys.exit(diff(sys.argv[2], sys.argv[3]))
