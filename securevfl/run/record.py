"""The last step of a run: the label holder collects the peers' meters and builds the record."""

from __future__ import annotations

import datetime as _dt
import time
from typing import Any

import numpy as np

from securevfl.context import AuditTap, PartyView, PublicInfo, RunSpec, has_budget, noise_seed
from securevfl.data.custom import alignment_of
from securevfl.data.domains import bound_source
from securevfl.disclosure import FINGERPRINT_WITHHELD, guarded, scrub_record, scrub_warnings
from securevfl.methods.base import Method
from securevfl.model.evaluation import metrics_for
from securevfl.privacy.centring import compose_into
from securevfl.privacy.coalitions import REPLACE_ONE, coalitions
from securevfl.rng import noise_generator_name
from securevfl.run.dp_ranges import compose_into_record
from securevfl.run.outcome import finite_values, outcome_warnings
from securevfl.runtime.base import Runtime
from securevfl.runtime.resources import cpu_seconds, peak_rss_bytes
from securevfl.version import __version__


def collect_record(
    spec: RunSpec,
    method: Method,
    rt: Runtime,
    info: PublicInfo,
    views: dict[int, PartyView],
    fit: Any,
    *,
    start: tuple[float, int, float],
    checkpoints: Any = None,
    audit: AuditTap | None = None,
) -> dict[str, Any] | None:
    """SPMD: every process sends its meters, fingerprints and resource use to the label holder,
    whose process returns the record (the others None). ``start``: (perf_counter, RSS, CPU s)
    when the run began."""
    t_start, rss_start, cpu_start = start
    composes = method.composes_centring(spec)
    # a budgeted run's fingerprints hash exact weights: they stay with their owners
    fingerprints = rt.collect({} if guarded(spec) else fit.fingerprints, dst=info.label_party)
    meters = rt.collect(rt.meter.export(), dst=info.label_party)
    used = (rss_start, peak_rss_bytes(), cpu_seconds() - cpu_start)
    peaks = rt.collect(used, dst=info.label_party)  # unmetered
    if peaks is not None:
        fit.stats.start_rss_bytes = {str(k): int(v[0]) for k, v in sorted(peaks.items())}
        fit.stats.peak_rss_bytes = {str(k): int(v[1]) for k, v in sorted(peaks.items())}
    if not rt.here(info.label_party):
        return None
    if meters is not None and len(rt.local_parties) < rt.n_parties:
        from securevfl.runtime.channel import merge_reports

        # networked: a peer's report is checked against this run before it is counted
        comm = merge_reports(rt, meters, frame_limit=rt.frame_limit).summary(rt.n_parties)
    else:
        comm = rt.meter.summary(rt.n_parties)
    fps: dict[str, str] = {}
    for d in (fingerprints or {}).values():
        fps.update({str(k): v for k, v in d.items()})
    y_test = views[info.label_party].y_test
    metrics = metrics_for(info.task, y_test, fit.test_scores)
    record = {
        "method": spec.method,
        "family": method.family,
        "capabilities": method.capabilities(spec.model),
        "dataset": spec.dataset,
        "parties": spec.parties,
        "n_train": info.n_train,
        "n_test": info.n_test,
        "n_features": info.n_features,
        "features_per_party": list(info.features_per_party),
        "metrics": metrics,
        # the accuracy of always answering the test split's most common class: the floor
        # a report marks every method against (None for regression)
        "majority_class_rate": majority_class_rate(info.task, y_test),
        "threat_model": threat_model_ref(spec.method),
        "time": {
            "train_s": round(fit.train_s, 6),
            "total_s": round(time.perf_counter() - t_start, 6),
            # every party's CPU, from setup to scoring (one process in-process: its own)
            "cpu_s": round(
                sum(v[2] for v in peaks.values())
                if len(rt.local_parties) < rt.n_parties
                else used[2],
                6,
            ),
        },
        "comm": comm,
        "privacy": fit.privacy.to_dict() if fit.privacy is not None else None,
        "config": spec.to_config(),
        "runtime": "inprocess" if len(rt.local_parties) == rt.n_parties else "processes",
        "noise_seeded": noise_seed(spec) is not None,
        "noise_generator": noise_generator_name(noise_seed(spec)),
        "model_fingerprint": fps,
        **({"fingerprint_withheld": FINGERPRINT_WITHHELD} if guarded(spec) else {}),
        "stats": fit.stats.to_dict(),
        "extra": fit.extra,
        "alignment": alignment_of(spec.dataset) if spec.id_column else None,
        **({"view": rt.view.view.summary()} if rt.view is not None else {}),
        "version": __version__,
        "timestamp": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    # a resumed run under the CSPRNG: every earlier run's centring (and DP ranges) released too
    again = 0 if checkpoints is None else checkpoints.centrings_again
    if record["privacy"] is not None and info.dp_bounds:  # the parties' DP ranges composed
        record["privacy"] = compose_into_record(record["privacy"], spec, method, info, 1 + again)
    if record["privacy"] is not None and spec.center and has_budget(spec) and not composes:
        for _ in range(1 + again):
            record["privacy"] = compose_into(
                record["privacy"],
                epsilon=float(spec.epsilon),
                unit=method.privacy_unit,
                parties=spec.parties,
                share=method.centre_share(spec),
            )
    if record["privacy"] is not None:  # every DP record says what no ε covers here
        record["privacy"]["threat_model"] = record["threat_model"]
        record["privacy"].setdefault("relation", REPLACE_ONE)
        record["privacy"]["coalitions"] = coalitions(method)
        record["privacy"]["public_bounds"] = bound_source(
            spec.dataset, fitted=info.fitted, bounds_file=spec.bounds, released=info.dp_bounds
        )
        record["privacy"]["outside_guarantee"] = [
            *record["privacy"].get("outside_guarantee", []),
            *preprocessing_disclosure(spec, info.fitted),
        ]
    scrub_record(record, spec, label_party=info.label_party)  # what may not be in it, or no ε
    at = f" at ε = {spec.epsilon:g}" if spec.epsilon is not None else ""
    warnings = fit.stats.warnings + outcome_warnings(
        info.task,
        fit.test_scores,
        metrics,
        record["privacy"],
        y_test=y_test,
        setting=f"{spec.method}{at} on {info.n_train} training rows",
    )
    if audit is not None and audit.noise_divisor != 1.0:  # the record marks the variant
        record["audit_noise_divisor"] = audit.noise_divisor
        warnings.append(
            f"audit variant: the DP noise was divided by {audit.noise_divisor:g}, so the "
            "reported ε does not hold for this run"
        )
    warnings = scrub_warnings(warnings, record, spec, label_party=info.label_party)
    if warnings:  # a result that looks fine but is not says so (printed by the CLI)
        record["stats"]["warnings"] = warnings
    return finite_values(record)  # strict JSON: a non-finite number is null (and warned)


def preprocessing_disclosure(spec: RunSpec, fitted: tuple[str, ...]) -> list[str]:
    """The data-dependent preprocessing that no ε covers: what the loader fitted on the rows
    (``Dataset.fitted``: a column's min/max where no public domain is known) and, for centring
    without a budget, the training means. Empty when scaling is from public domains and
    centring is released under the budget (the default of every catalogue dataset)."""
    out = []
    if fitted:
        shown = "; ".join(fitted[:3]) + (f"; and {len(fitted) - 3} more" if len(fitted) > 3 else "")
        out.append(
            f"computed from the rows and treated as public: {shown} (declare public domains: "
            "--bounds for csv data)"
        )
    if spec.center and not has_budget(spec):
        out.append("training means (centring) are computed from the data and treated as public")
    return out


def majority_class_rate(task: str, y_test: np.ndarray | None) -> float | None:
    """The test accuracy of always predicting the most common test class (classification)."""
    if task == "regression" or y_test is None or len(y_test) == 0:
        return None
    counts = np.unique(np.asarray(y_test), return_counts=True)[1]
    return round(float(counts.max()) / len(y_test), 6)


def threat_model_ref(method: str) -> str:
    """Where the method's adversary, collusion and who-sees-what are stated."""
    return f"docs/threat-model.md#{method}"
