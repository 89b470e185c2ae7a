"""``securevfl audit``: neighbouring-dataset runs of a method as the user runs it, and a test.

Each trial runs the method through :func:`securevfl.experiment.run_experiment` (the entry point
of ``securevfl run``) on the data with one canary row set to an extreme point (see
:func:`canary_hook`). Public randomness (split, initialisation, batch order) is
the spec's seed; the DP noise is fresh from the CSPRNG each trial. A linear test is fitted on
a share of the trials and applied to the rest; its errors bound ε from below (``stats``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from securevfl.audit.release import has_release_probe
from securevfl.audit.release_audit import audit_release_once
from securevfl.audit.stats import epsilon_lower_bound, fit_direction
from securevfl.audit.view import CANARY_PARTY, CANARY_ROW, AuditorView, auditor_view, observe
from securevfl.context import AuditTap, PartyView, PublicInfo, RunSpec
from securevfl.errors import ConfigError, check_int, check_open_unit
from securevfl.experiment import run_experiment, validate_spec
from securevfl.runtime.inprocess import InProcessRuntime
from securevfl.runtime.view import ViewRecorder

CONFIDENCE = 0.95
FIT_SHARE = 0.25  # trials spent on fitting the test; the rest are the held-out evidence


VIEWS = ("auto", "release", "one-release", "run")
RUN_TRIALS = 200  # whole runs per variant (view 'run')
RELEASE_TRIALS = 100_000  # canary releases per variant (view 'release'): one noise draw each


@dataclass(frozen=True)
class AuditConfig:
    trials: int | None = None  # per audited variant, both worlds together; None: the view's
    noise_divisor: float = 1.0  # > 1: a deliberately under-noised variant (audit only)
    seed: int = 0  # the audit's own choices: which trials are world 1, the fit/test split
    view: str = "auto"  # 'release' where the method has one, else 'run'
    # the variants divide only this release family's noise (a noise generator purpose, e.g.
    # "release-once/bottom"); None: every family
    family: str | None = None


def _extreme(X: np.ndarray, y: np.ndarray, high: bool) -> np.ndarray:
    """A point at the corner of the other training rows' box, on the side each column's
    correlation with the label points to (``high``) or the opposite corner: the canary moves a
    linear score (a GLM's ``x·w``, a Taylor objective's coefficients) as far as the data allow."""
    others = np.delete(X, CANARY_ROW, axis=0)
    yo = np.delete(np.asarray(y, dtype=float), CANARY_ROW)
    sign = np.sign((others - others.mean(axis=0)).T @ (yo - yo.mean()))
    up = (sign >= 0) == high
    return np.where(up, others.max(axis=0), others.min(axis=0))


def _planted(X: np.ndarray, y: np.ndarray, high: bool) -> np.ndarray:
    X = X.copy()
    X[CANARY_ROW] = _extreme(X, y, high)
    return X


def _with_query(X_test: np.ndarray, row: np.ndarray) -> np.ndarray:
    """The test rows with the canary appended: the auditor queries the released model on it."""
    return np.vstack([X_test, row[None, :]])


def canary_hook(av: AuditorView, world: int):
    """A ``views_hook`` for run_experiment that plants the canary of ``world``: party-row unit,
    party ``CANARY_PARTY``'s block at the opposite corners (world 0 / 1); sample unit, the
    whole row at the high corner with label min / max (the largest change of a loss term).
    The canary row is also appended to the test rows, so the released model is scored on it."""

    def label(y: np.ndarray) -> np.ndarray:
        y = np.array(y, copy=True)
        y[CANARY_ROW] = y.max() if world else y.min()
        return y

    def hook(info: PublicInfo, views: dict[int, PartyView], pooled: Any):
        info = dataclasses.replace(info, n_test=info.n_test + 1)
        y = views[info.label_party].y_train if info.label_party in views else None
        if av.kind == "outputs":  # a pooled baseline: its one data table
            X, y, Xt, yt = pooled()
            X1, y1 = _planted(X, y, True), label(y)
            Xt1, yt1 = _with_query(Xt, X1[CANARY_ROW]), np.append(yt, y1[CANARY_ROW])
            for v in views.values():  # the label holder's own copy of the test labels
                if v.y_test is not None:
                    v.y_test = yt1
            return info, views, lambda: (X1, y1, Xt1, yt1)
        if y is None:
            raise ConfigError("an audit runs every party in-process: the labels are missing")
        changed = range(info.data_parties) if av.whole_row else (CANARY_PARTY,)
        for k in changed:
            if views[k].X_train.shape[1]:
                views[k].X_train = _planted(views[k].X_train, y, av.whole_row or bool(world))
        for v in views.values():
            v.X_test = _with_query(v.X_test, v.X_train[CANARY_ROW])
        lab = views[info.label_party]
        if av.whole_row:
            lab.y_train = label(y)
        lab.y_test = np.append(lab.y_test, lab.y_train[CANARY_ROW])
        return info, views, pooled

    return hook


def run_trial(
    spec: RunSpec, av: AuditorView, world: int, divisor: float, family: str | None = None
) -> tuple[np.ndarray, dict]:
    """One run of the method in ``world``: the auditor's numbers and the run's record."""
    n = validate_spec(spec).n_parties(spec)
    rt = InProcessRuntime(n)
    rt.view = ViewRecorder(av.party)
    with rt:
        record = run_experiment(
            spec,
            rt,
            views_hook=canary_hook(av, world),
            audit=AuditTap(noise_divisor=divisor, family=family),
        )
    return observe(rt.view.view, av, record["n_train"]), record


def audit_once(spec: RunSpec, cfg: AuditConfig, progress=None) -> dict[str, Any]:
    """Audit ``spec`` (one variant): trials, the fitted test, its held-out errors, the bound."""
    cfg = dataclasses.replace(cfg, trials=cfg.trials or RUN_TRIALS)
    check_int("trials", cfg.trials, minimum=8, maximum=100_000)
    if cfg.noise_divisor < 1:
        raise ConfigError(
            f"noise divisor must be >= 1 (an audit never adds noise), got {cfg.noise_divisor}"
        )
    method = validate_spec(spec)
    if spec.epsilon is None:
        raise ConfigError(
            f"audit needs a DP method run with --epsilon, got {spec.method!r} without"
        )
    av = auditor_view(method, spec)
    rng = np.random.default_rng([cfg.seed, 0xA0D17])
    worlds = rng.permutation(np.arange(cfg.trials) % 2)  # balanced, in a random order
    t0 = time.perf_counter()
    obs, claimed, unit, accountant = [], None, None, None
    for i, w in enumerate(worlds):
        x, record = run_trial(spec, av, int(w), cfg.noise_divisor, cfg.family)
        obs.append(x)
        priv = record.get("privacy") or {}
        if claimed is None:
            claimed, unit, accountant = (
                priv.get("epsilon"),
                priv.get("unit"),
                priv.get("accountant"),
            )
        if progress is not None:
            progress(i + 1, cfg.trials)
    if claimed is None:
        raise ConfigError(f"method {spec.method!r} reports no ε: there is nothing to audit")
    sizes = {len(x) for x in obs}
    if len(sizes) != 1 or 0 in sizes:
        raise ConfigError(
            "the auditor's view must hold the same nonzero count of numbers every trial, "
            f"got {sorted(sizes)}"
        )
    X = np.stack(obs)
    n_fit = max(4, int(round(FIT_SHARE * cfg.trials)))
    fit, test = np.arange(n_fit), np.arange(n_fit, cfg.trials)
    w, thr = fit_direction(X[fit][worlds[fit] == 0], X[fit][worlds[fit] == 1])
    says_one = X[test] @ w > thr
    truth = worlds[test] == 1
    fp, fn = int(np.sum(says_one & ~truth)), int(np.sum(~says_one & truth))
    neg, pos = int(np.sum(~truth)), int(np.sum(truth))
    alpha = 1.0 - CONFIDENCE
    check_open_unit("delta", spec.delta)
    lb = epsilon_lower_bound(fp, neg, fn, pos, delta=spec.delta, alpha=alpha)
    most = epsilon_lower_bound(0, neg, 0, pos, delta=spec.delta, alpha=alpha)
    return {
        "noise_divisor": cfg.noise_divisor,
        "claimed_epsilon": claimed,
        "epsilon_lower_bound": lb,
        "violation": lb > claimed,
        "largest_detectable_epsilon": most,
        "trials": cfg.trials,
        "fit_trials": n_fit,
        "test": {"false_pos": fp, "negatives": neg, "false_neg": fn, "positives": pos},
        "view_size": int(X.shape[1]),
        "privacy_unit": unit,
        "accountant": accountant,
        "time_s": round(time.perf_counter() - t0, 3),
    }


def resolve_view(method: Any, spec: RunSpec, view: str) -> str:
    """'release' (the release-step audit) where the method has one and ``view`` allows it,
    else 'run' (whole runs of the method, the canary in the data)."""
    if view not in VIEWS:
        raise ConfigError(f"audit view must be one of {', '.join(VIEWS)}, got {view!r}")
    has = has_release_probe(method, spec)
    if view in ("release", "one-release") and not has:
        raise ConfigError(
            f"view 'release' audits hdp-vfl, secureboost-dp and the release-once ldp-vfl, "
            f"vafl-dp, afe-vfl, got {spec.method!r}"
        )
    if view == "one-release":
        return view
    if view == "run" and method.name == "secureboost-dp":
        raise ConfigError(
            "secureboost-dp is audited at its releases (view release): a whole run's output "
            "also depends on the row partitions it returns exactly (outside its ε), so a run "
            "view would test more than the claim covers"
        )
    return "release" if view == "release" or (view == "auto" and has) else "run"


def audit(
    spec: RunSpec, cfg: AuditConfig, *, variants: tuple[float, ...] = (), progress=None
) -> dict[str, Any]:
    """The audit record: the method as run, then each under-noised variant (power shown)."""
    if spec.seed is None:  # public randomness fixed (the noise is fresh every trial anyway)
        spec = dataclasses.replace(spec, seed=0)
    method = validate_spec(spec)
    if spec.epsilon is None:
        raise ConfigError(
            f"audit needs a DP method run with --epsilon, got {spec.method!r} without"
        )
    mode = resolve_view(method, spec, cfg.view)
    for d in (cfg.noise_divisor, *variants):
        if not d >= 1:
            raise ConfigError(f"noise divisor must be >= 1 (an audit never adds noise), got {d}")
    if mode in ("release", "one-release"):
        trials = cfg.trials or RELEASE_TRIALS

        def one(d: float) -> dict[str, Any]:
            r = audit_release_once(
                spec,
                trials=trials,
                noise_divisor=d,
                seed=cfg.seed,
                alpha=1 - CONFIDENCE,
                family=cfg.family if d != 1.0 else None,
                whole_run=mode == "release",
            )
            if progress is not None:
                progress(trials, trials)
            return r

        main = one(cfg.noise_divisor)
        runs = [one(float(d)) for d in variants]
        view = {"kind": "release", "party": CANARY_PARTY, "describe": main["view"]}
        canary = "at the release, placed at the bound the accountant assumes"
    else:
        trials = cfg.trials or RUN_TRIALS
        cfg = dataclasses.replace(cfg, trials=trials)
        av = auditor_view(method, spec)
        main = audit_once(spec, cfg, progress)
        runs = [audit_once(spec, dataclasses.replace(cfg, noise_divisor=float(d)), progress)
                for d in variants]  # fmt: skip
        view = {"kind": av.kind, "party": av.party, "describe": av.describe}
        canary = "whole row and label" if av.whole_row else f"party {CANARY_PARTY}'s block"
    caught = [r["noise_divisor"] for r in runs if r["violation"]]
    return {
        "audit": "release" if mode == "one-release" else mode,  # reports key records by it
        "release_view": {"release": "whole run", "one-release": "one family"}.get(mode),
        "variant_family": cfg.family or "all",
        "method": spec.method,
        "dataset": spec.dataset,
        "parties": spec.parties,
        "epochs": spec.epochs if spec.model != "gbdt" else None,  # boosted trees: rounds
        "trees": spec.option("trees", method) if spec.model == "gbdt" else None,
        "epsilon": spec.epsilon,
        "delta": spec.delta,
        "seed": spec.seed,
        "view": view,
        "canary": canary,
        "confidence": CONFIDENCE,
        "claimed_epsilon": main["claimed_epsilon"],
        "epsilon_lower_bound": main["epsilon_lower_bound"],
        "largest_detectable_epsilon": main["largest_detectable_epsilon"],
        "result": main,
        "variants": runs,
        "smallest_divisor_caught": min(caught) if caught else None,
    }
