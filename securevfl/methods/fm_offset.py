"""fm-vfl's residual mode (``--offset gbdt``): the label holder keeps its own model, the
partners' noisy objective learns what that model lacks.

The label holder fits boosted trees on its own columns (``models.trees``) and gives each
training row its margin m_j (out of fold: from trees that never saw the row, so the margin is as
good as a test row's will be). The objective is the logistic loss with m_j as a per-row offset,
ℓ(m_j + z_j, y_j) with z_j = x_j·w over the partners' columns (and the constant column), taken
to second order in z around the offset:

    ℓ(m + z) <= ℓ(m) + (σ(m) - y) z + z²/8,

the curvature bound σ(1 - σ) <= 1/4 makes the quadratic a majoriser of the loss, so its
minimiser never overshoots what the offset already explains. Its coefficients are those of
fm-vfl's Eq. 4 with the label column v = 1/2 - y (the derivative at the offset 0) replaced by
v_j = σ(m_j) - y_j: λ_a = Σ v_j x_ja, λ_aa = Σ x_ja²/8, λ_ab = Σ x_ja x_jb/4. The label holder's
columns are not in the objective (it keeps them in its trees).

Where the trees are confident the loss is far flatter than 1/4, and the majoriser's step falls
short. The label holder therefore scales the partners' term by g = 1/(4 h̄), h̄ the mean of
σ(m_j)(1 - σ(m_j)) over its training rows (``step_gain``): g·w minimises the same quadratic with
curvature h̄ in place of 1/4. h̄ is its own rows' number and g is applied where it scores, so
this is post-processing of the released model (no event). A test row's score is
m_test + g·(x_test·w), m_test from trees fitted on every training row.

Sensitivity (``gaussian_sensitivity`` with ``label_bound`` 1). For fixed offsets a row adds
φ(x, v) with |v| = |σ(m) - y| < 1 (against 1/2 for v = 1/2 - y), and fm_gaussian's bound
Δ₂ <= 2 sqrt(v_max² R² + 2 c² R⁴) holds with v_max = 1, R² = 1 + Σ_{k>=1} R_k² (the constant
column and the partners' row blocks; the label holder's columns are not in the vector). A
partner's row (unit ``party-row``: one row of its block moves, the offsets are the label
holder's and do not) therefore moves the released vector by at most Δ₂, and each partner's ε
composes that one Gaussian release with its own released column means.

What the bound does not cover: the offsets come from a model fitted on all of the label
holder's training rows, so changing one of its rows (or one label) may move every v_j, by an
amount no public number bounds. No ε is claimed for the label holder's rows in this mode: the
record's unit is ``party-row`` over the partners' rows, and ``outside_guarantee`` says that the
label holder's columns and labels shape the opened first-order coefficients. It is the label
holder's own data, released by its own choice: the partners' rows keep their ε.

``--offset dp-gbdt`` closes that gap (``securevfl.methods.fm_dp_offset``): the trees are fitted
under DP on a share of the budget (``models.dp_trees``), so once released they are fixed and a
row's margin depends on that row alone; the bound above then covers replacing a whole row (its
columns at every party and its label), and the trees, the objective and the means compose in
one sample-unit ledger.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from securevfl.context import Option, RunContext, RunSpec
from securevfl.errors import ConfigError
from securevfl.models.tree_arrays import clipped_log_odds, trees_to_arrays
from securevfl.privacy.accountant import PrivacyLedger
from securevfl.privacy.events import PureDpEvent, gaussian_event

OFFSETS = ("none", "gbdt", "dp-gbdt")
OFFSET_OPTION = Option(
    str,
    "none",
    "residual training (binary, --mechanism gaussian): the label holder keeps boosted trees on "
    "its own columns and the noisy objective fits the partners' columns to what the trees lack. "
    "dp-gbdt: the trees are fitted under DP on a share of epsilon (--offset-share), so the run's "
    "epsilon covers every party's rows and the labels (sample unit); gbdt: scikit-learn's trees, "
    "and epsilon covers only the partners' rows (party-row: the label holder's rows shape the "
    "coefficients outside it); none: one joint GLM (sample unit)",
    choices=OFFSETS,
)
LABEL_HOLDER_OUTSIDE = (
    "--offset gbdt: the label holder's columns and labels shape the opened first-order "
    "coefficients through its trees' margins (sigma(m_j) - y_j); a fitted model moves every "
    "margin with one of its rows, so no epsilon covers the label holder's rows: the unit is "
    "party-row over the partners' rows"
)


def check_offset(spec: RunSpec, method: Any) -> None:
    """Refuse the residual mode where its bound is not derived (module docstring)."""
    mode = spec.option("offset", method)
    if mode == "none":
        return
    if spec.option("mechanism", method) != "gaussian":
        raise ConfigError(
            f"--offset {mode} needs --mechanism gaussian (its bound is derived for the Gaussian "
            f"release), got --mechanism {spec.option('mechanism', method)}"
        )
    if spec.option("budget", method) != "top-down":
        raise ConfigError(f"--offset {mode} needs --budget top-down, got --budget bottom-up")


def own_offsets(ctx: RunContext, noise: dict) -> tuple[np.ndarray, np.ndarray, dict, float]:
    """(training margins, test margins, the trees as arrays, the step gain): the label holder's
    boosted trees on its own columns (``--offset gbdt``: scikit-learn's, training margins out
    of fold; ``dp-gbdt``: ``fm_dp_offset``); the test margins are scored from the arrays, as a
    saved model scores them (``models.tree_arrays``)."""
    if noise.get("offset") == "dp-gbdt":
        from securevfl.methods.fm_dp_offset import dp_offsets

        return dp_offsets(ctx, noise["tree_config"], noise["mu_per_tree"])
    from securevfl.models.trees import fit_trees, oof_logits  # sklearn: only in this mode

    v = ctx.views[0]
    X, y = np.asarray(v.X_train, dtype=np.float64), np.asarray(v.y_train)
    seed = int(ctx.shared_seed % 2**31)
    m = oof_logits(X, y, n_classes=2, seed=seed)[:, 0].astype(np.float64)
    arrays = trees_to_arrays(fit_trees(X, y, "binary", seed))
    return m, tree_offsets(arrays, v.X_test), arrays, step_gain(m)


def tree_offsets(arrays: dict[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    """The trees' log-odds of rows ``X``, clipped as the out-of-fold margins are (and as
    ``model.predict_trees.own_tree_offsets`` scores a saved model)."""
    return clipped_log_odds(arrays, X)


def residual_vector(m: np.ndarray, y: np.ndarray) -> np.ndarray:
    """v_j = σ(m_j) - y_j: the logistic loss's derivative at the offset (module docstring)."""
    return 1.0 / (1.0 + np.exp(-np.asarray(m, dtype=np.float64))) - np.asarray(y, dtype=float)


def offset_head(part: Any, gain: float, trees: dict, own_columns: int, parties: int) -> None:
    """The label holder's saved part in residual mode: its weights scaled by the step gain
    (the constant's, then a zero for each of its columns: they enter through the trees), each
    partner's message scaled by it (``passive_scale``) and its trees' arrays."""
    w = np.asarray(part.arrays["w"], dtype=np.float64)
    part.arrays["w"] = np.concatenate([gain * w, np.zeros(own_columns)])
    part.arrays.update(trees)
    part.meta["passive_scale"] = {str(k): gain for k in range(1, parties)}
    part.meta["own_trees"] = "clipped log-odds added to the margin (models.tree_arrays)"


def step_gain(m: np.ndarray) -> float:
    """1 / (4 h̄), h̄ = mean σ(m_j)(1 - σ(m_j)) over the training rows: the server minimises
    the majoriser (curvature 1/4); the label holder rescales its solution to the quadratic of
    curvature h̄, the loss's mean curvature at the offsets (module docstring)."""
    p = 1.0 / (1.0 + np.exp(-np.asarray(m, dtype=np.float64)))
    return float(0.25 / max(float(np.mean(p * (1.0 - p))), 1e-6))


def offset_ledger(sensitivity: float, sigma: float, parties: int, eps_c: float) -> PrivacyLedger:
    """Each partner k >= 1 (unit party-row): the one Gaussian release of the objective and, with
    centring, its own released means; the label holder's rows are not claimed (module
    docstring), so neither it nor a sample accountant appears."""
    ledger = PrivacyLedger("party-row")
    ev = gaussian_event(sigma=sigma, sensitivity=sensitivity)
    for k in range(1, parties):
        ledger.compose(k, ev, sample=False)
        if eps_c > 0:
            ledger.compose(k, PureDpEvent(eps_c), sample=False)
    return ledger


def offset_noise_plan(
    method: Any, spec: RunSpec, parties: int, intercept: bool, own_columns: int
) -> dict:
    """fm-vfl's noise plan in residual mode: one Gaussian σ for a partner's party-row ε (its
    own means composed in), the bound of the module docstring (v_max = 1, the label holder's
    columns out of R)."""
    from securevfl.methods.fm_noise import centring_of, fm_delta
    from securevfl.privacy.fm_gaussian import gaussian_sigma, row_l2_bound

    R_k = float(spec.option("l2_bound", method))
    R = row_l2_bound([R_k] * (parties - 1), intercept)
    dp = spec.option("offset", method) == "dp-gbdt"
    eps_c = centring_of(method, spec, parties)
    sigma, sens2 = gaussian_sigma(
        "logistic",
        R,
        epsilon=spec.epsilon,
        delta=fm_delta(spec),
        # sample unit (dp-gbdt): every party's means; party-row: a partner's own (offset_ledger)
        parties=parties if dp else 1,
        centring_epsilon=eps_c,
        label_bound=1.0,
    )
    more: dict[str, Any] = {"offset": spec.option("offset", method)}
    if dp:  # σ above meets ε alone; the trees take their share of its μ² (fm_dp_offset)
        from securevfl.methods.fm_dp_offset import dp_budget, tree_config
        from securevfl.models.dp_trees import tree_releases

        share = float(spec.option("offset_share", method))
        cfg = tree_config(spec, method)
        sigma, mu_tree = dp_budget(sens2, sigma, share, cfg.trees)
        releases = tree_releases(cfg, mu_tree, own_columns)
        more.update(mu_per_tree=mu_tree, tree_config=cfg, tree_releases=releases)
    pairs = [(a, b) for a in range(parties) for b in range(a, parties)]
    return {
        **more,
        "mechanism": "gaussian",
        "gaussian": True,
        "scales": dict.fromkeys(pairs, sigma),
        "bounds": [("l2", R_k)] * parties,
        "sigma": sigma,
        "l2_sensitivity": sens2,
        "row_l2_bound": R,
        "centring_epsilon": eps_c,
    }


def offset_privacy(spec: RunSpec, noise: dict, parties: int, method: Any, outside: list[str]):
    """The record's privacy in residual mode (``gbdt``: unit party-row, each partner's rows;
    ``dp-gbdt``: unit sample, the trees and the objective composed, ``fm_dp_offset``)."""
    from securevfl.methods.fm_noise import centring_facts, fm_delta

    eps_c = noise["centring_epsilon"]
    extra: dict[str, Any] = {
        "mechanism": "gaussian",
        "offset": spec.option("offset", method),
        "sigma": noise["sigma"],
        "l2_sensitivity": noise["l2_sensitivity"],
        "row_l2_bound": noise["row_l2_bound"],
        "label_bound": 1.0,
    }
    if eps_c > 0:
        extra["centring"] = centring_facts(method, spec, eps_c)
    if noise["offset"] == "dp-gbdt":
        from securevfl.methods.fm_dp_offset import dp_extra, dp_ledger

        objective = (noise["sigma"], noise["l2_sensitivity"])
        ledger = dp_ledger(objective, noise["tree_releases"], parties, eps_c)
        extra.update(dp_extra(spec, method, noise))
        return ledger.report(
            fm_delta(spec), target_epsilon=spec.epsilon, outside_guarantee=outside, extra=extra
        )
    ledger = offset_ledger(noise["l2_sensitivity"], noise["sigma"], parties, eps_c)
    return ledger.report(
        fm_delta(spec),
        target_epsilon=spec.epsilon,
        outside_guarantee=[*outside, LABEL_HOLDER_OUTSIDE],
        extra=extra,
    )
