"""fm-vfl's noise plan and privacy record, for either mechanism: Lemma 1's per-block Laplace
(L1-bounded row blocks) or one Gaussian on the whole objective (L2-bounded row blocks,
``securevfl.privacy.fm_gaussian`` has the derivation)."""

from __future__ import annotations

from typing import Any

from securevfl.context import RunSpec
from securevfl.methods.base import Method
from securevfl.methods.fm_options import DEFAULT_DELTA, resolve_l1_bound
from securevfl.privacy.centring import centring_epsilon
from securevfl.privacy.fm_gaussian import gaussian_sigma, row_l2_bound, shared_gaussian_ledger
from securevfl.privacy.fm_objective import parse_party_epsilons
from securevfl.privacy.functional import (
    block_sensitivities,
    bottom_up_scales,
    fm_ledger,
    global_sensitivity,
    party_sensitivity,
    target_bottom_up_scales,
    top_down_scales,
)

SCORING_OUTSIDE = (
    "test scoring: each party sends X_k,test w_k in the clear (test rows; the model "
    "w is post-processing of the noisy objective, so training rows stay covered)"
)


def fm_delta(spec: RunSpec) -> float:
    """The run's δ (a RunSpec built directly has none: the CLI's default then)."""
    return float(DEFAULT_DELTA if spec.delta is None else spec.delta)


def centring_of(method: Method, spec: RunSpec, parties: int) -> float:
    """ε_c of each party's released means when the method composes them itself (0: none)."""
    if not (spec.center and spec.epsilon is not None and method.composes_centring(spec)):
        return 0.0
    share = method.centre_share(spec)
    return centring_epsilon(float(spec.epsilon), unit="sample", parties=parties, share=share)


def centring_facts(method: Method, spec: RunSpec, eps_c: float) -> dict[str, Any]:
    """The record's ``centring`` block for means composed in the method's own ledger."""
    return {
        "mechanism": "laplace",
        "epsilon_per_party": eps_c,
        "share": method.centre_share(spec),
        "composition": "pld (the K pure releases composed with the objective's Gaussian)",
    }


def laplace_scales(method: Method, spec: RunSpec, sens: dict, K: int) -> dict:
    """Laplace scale per block: top-down from ε, or bottom-up from the parties' offers."""
    offers = parse_party_epsilons(spec.option("party_epsilons", method), K)
    if spec.option("budget", method) == "top-down":
        return top_down_scales(sens, spec.epsilon)
    if offers is None:
        return target_bottom_up_scales(sens, spec.epsilon)
    return bottom_up_scales(sens, offers)


def noise_plan(
    method: Method, spec: RunSpec, task: str, dims: list[int], feats: list[int], intercept: bool
) -> dict[str, Any]:
    """The mechanism's noise: each block's scale (Laplace b, or the one Gaussian σ) and each
    party's row-norm bound (``("l1", B_k)`` for Lemma 1, ``("l2", R_k)`` for the Gaussian)."""
    K = len(dims)
    mechanism = str(spec.option("mechanism", method))
    pairs = [(a, b) for a in range(K) for b in range(a, K)]
    if mechanism == "gaussian":
        R_k = float(spec.option("l2_bound", method))
        R = row_l2_bound([R_k] * K, intercept)
        eps_c = centring_of(method, spec, K)
        sigma, sens2 = gaussian_sigma(
            task, R, epsilon=spec.epsilon, delta=fm_delta(spec), parties=K, centring_epsilon=eps_c
        )
        return {
            "mechanism": mechanism,
            "gaussian": True,
            "scales": dict.fromkeys(pairs, sigma),
            "bounds": [("l2", R_k)] * K,
            "sigma": sigma,
            "l2_sensitivity": sens2,
            "row_l2_bound": R,
            "centring_epsilon": eps_c,
        }
    l1_mode = spec.option("l1_bound", method)
    # each party's rows' L1 bound, its constant column excluded (Lemma 1 adds it back)
    l1 = [resolve_l1_bound(l1_mode, feats[k], False) for k in range(K)]
    sens = block_sensitivities(task, [l1[k] + dims[k] - feats[k] for k in range(K)])
    return {
        "mechanism": mechanism,
        "gaussian": False,
        "scales": laplace_scales(method, spec, sens, K),
        "bounds": [("l1", b) for b in l1],
        "sens": sens,
    }


def fm_privacy(spec: RunSpec, noise: dict, dims: list[int], method: Method):
    """The accountant's report for the released noisy objective: every block's Laplace, or the
    one Gaussian release of the whole coefficient vector (``privacy.fm_gaussian``)."""
    K = len(dims)
    outside = [SCORING_OUTSIDE]
    extra: dict[str, Any] = {
        "mechanism": noise["mechanism"],
        "budget": spec.option("budget", method),
        "d": int(sum(dims)),
    }
    if noise["gaussian"]:
        extra.update(
            sigma=noise["sigma"],
            l2_sensitivity=noise["l2_sensitivity"],
            row_l2_bound=noise["row_l2_bound"],
        )
        eps_c = noise["centring_epsilon"]
        ledger = shared_gaussian_ledger(noise["l2_sensitivity"], noise["sigma"], K, eps_c)
        if eps_c > 0:
            extra["centring"] = centring_facts(method, spec, eps_c)
        return ledger.report(
            fm_delta(spec), target_epsilon=spec.epsilon, outside_guarantee=outside, extra=extra
        )
    sens, scales = noise["sens"], noise["scales"]
    extra.update(
        delta_f=global_sensitivity(sens),
        blocks={
            f"{a},{b}": {"sensitivity": sens[(a, b)], "scale": scales[(a, b)]} for (a, b) in sens
        },
    )
    return fm_ledger(sens, scales).report(
        0.0,
        target_epsilon=spec.epsilon,
        outside_guarantee=outside,
        per_party_extra={k: {"sensitivity": party_sensitivity(sens, k)} for k in range(K)},
        extra=extra,
    )
