"""One variant of a release-step audit (``release``): a run, then many canary releases, a test.

The run is ``run_experiment`` as ``securevfl run`` runs it (in-process, fresh CSPRNG noise,
divided by ``noise_divisor`` in an under-noised variant); its record gives the claimed ε. Its
trainer's hooks then release the canary ``trials`` times (half world 0, half world 1, in a
random order). The test is the likelihood-ratio statistic of two Gaussians with the canary's
known difference (the release projected on ``direction``), its threshold chosen on one half of
the trials (``stats.best_threshold``); its errors on the other half give the Clopper-Pearson
bound (``stats.epsilon_lower_bound``).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from securevfl.audit.release import release_probe, whole_run_probe
from securevfl.audit.stats import best_threshold, epsilon_lower_bound
from securevfl.context import AuditTap, RunSpec
from securevfl.errors import ConfigError, check_int
from securevfl.experiment import run_experiment, validate_spec
from securevfl.runtime.inprocess import InProcessRuntime

FIT_SHARE = 0.5  # the threshold's half; the other half is the evidence
MAX_TRIALS = 2_000_000
CHUNK_NUMBERS = 4_000_000  # released numbers drawn at once (32 MB of float64)


def release_world_trials(
    probe_draw: Any, direction: np.ndarray, trials: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """(worlds, scores): balanced worlds in a random order (the audit's own seed) and each
    trial's statistic ⟨release, direction / v⟩ (world 1 scores higher), v each coordinate's
    noise variance estimated on the fit share of the trials (both worlds pooled): the
    likelihood-ratio test of independent Gaussians with the known difference ``direction``,
    weighted by the noise the releases actually carry, not by the noise the run claims (so an
    under-noised family weighs what it leaks).

    Drawn ``CHUNK_NUMBERS`` numbers at a time, so that a long run's view (secureboost-dp: every
    tree level's bin sums) never sits in memory whole; where the fit share does not fit one
    chunk its draws give the variance and fresh draws of the same trials give its scores."""
    rng = np.random.default_rng([seed, 0xA0D18])
    worlds = rng.permutation(np.arange(trials) % 2)
    n_fit = int(round(FIT_SHARE * trials))
    step = max(1, CHUNK_NUMBERS // max(1, len(direction)))
    count, s1, s2 = np.zeros(2), np.zeros((2, len(direction))), np.zeros((2, len(direction)))
    kept = None
    for a in range(0, n_fit, step):
        w = worlds[a : min(a + step, n_fit)]
        x = probe_draw(w)
        for v in (0, 1):
            count[v] += np.sum(w == v)
            s1[v] += x[w == v].sum(axis=0)
            s2[v] += (x[w == v] ** 2).sum(axis=0)
        kept = x if n_fit <= step else None
    rss = sum(s2[v] - s1[v] ** 2 / count[v] for v in (0, 1) if count[v])
    weights = direction / np.maximum(rss / max(count.sum(), 1.0), 1e-300)
    scores = [kept @ weights] if kept is not None else []
    for a in range(n_fit if kept is not None else 0, trials, step):
        scores.append(probe_draw(worlds[a : min(a + step, trials)]) @ weights)
    return worlds, np.concatenate(scores) if scores else np.zeros(0)


def held_out_bound(
    worlds: np.ndarray, scores: np.ndarray, *, delta: float, alpha: float
) -> dict[str, Any]:
    """Threshold on the first ``FIT_SHARE`` of the trials, Clopper-Pearson bound on the rest."""
    n_fit = int(round(FIT_SHARE * len(worlds)))
    fw, fs, hw, hs = worlds[:n_fit], scores[:n_fit], worlds[n_fit:], scores[n_fit:]
    t = best_threshold(fs[fw == 0], fs[fw == 1], delta=delta, alpha=alpha)
    says_one, truth = hs > t, hw == 1
    fp, fn = int(np.sum(says_one & ~truth)), int(np.sum(~says_one & truth))
    neg, pos = int(np.sum(~truth)), int(np.sum(truth))
    return {
        "epsilon_lower_bound": epsilon_lower_bound(fp, neg, fn, pos, delta=delta, alpha=alpha),
        "largest_detectable_epsilon": epsilon_lower_bound(0, neg, 0, pos, delta=delta, alpha=alpha),
        "fit_trials": n_fit,
        "threshold": t,
        "test": {"false_pos": fp, "negatives": neg, "false_neg": fn, "positives": pos},
    }


def audit_release_once(
    spec: RunSpec,
    *,
    trials: int,
    noise_divisor: float,
    seed: int,
    alpha: float,
    family: str | None = None,
    whole_run: bool = True,
) -> dict[str, Any]:
    """One variant: the method's run, its claimed ε, the canary releases and the bound.
    ``family``: the variant divides only that release family's noise (a noise generator
    purpose); ``whole_run``: the auditor sees every release family of the canary (else the
    one tapped family)."""
    check_int("trials", trials, minimum=8, maximum=MAX_TRIALS)
    method = validate_spec(spec)
    t0 = time.perf_counter()
    tap = AuditTap(noise_divisor=noise_divisor, family=family)
    rt = InProcessRuntime(method.n_parties(spec))
    with rt:
        record = run_experiment(spec, rt, audit=tap)
    priv = record.get("privacy") or {}
    if priv.get("epsilon") is None:
        raise ConfigError(
            f"method {spec.method!r} reports no ε for this run (outside its guarantee: "
            f"{priv.get('outside_guarantee')}): there is nothing to audit"
        )
    if whole_run:
        probe = whole_run_probe(method.name, tap.seen, tap.facts)
    else:
        probe = release_probe(method.name, tap.seen)
    worlds, scores = release_world_trials(probe.draw, probe.direction, trials, seed)
    delta = float(priv.get("delta") or spec.delta)
    out = held_out_bound(worlds, scores, delta=delta, alpha=alpha)
    return {
        "noise_divisor": noise_divisor,
        "noise_family": family or "all",
        "claimed_epsilon": priv.get("epsilon"),
        **out,
        "violation": out["epsilon_lower_bound"] > priv["epsilon"],
        "trials": trials,
        "view_size": int(len(probe.direction)),
        "view": probe.describe,
        "privacy_unit": priv.get("unit"),
        "accountant": priv.get("accountant"),
        "time_s": round(time.perf_counter() - t0, 3),
    }
