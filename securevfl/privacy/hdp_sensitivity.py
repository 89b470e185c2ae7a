"""L2 sensitivities of HDP-VFL's released streams, for the algorithm as we run it.

What is released (per minibatch step t, all parties): every passive party k sends
IR~_k = X_k,batch·w_k + N(0, σ_B² I) to the active party; the active party returns
h~ = h(θ) + N(0, σ_A² I), h = ∂ℓ/∂θ, to the passive parties. The active party updates its block
(and bias) with the exact h; **every passive party clips the h~ it receives to [-c, c]** (c public,
option ``derivative_clip``) before using it. At test time each passive party scores the test rows
with noisy weights w_k + N(0, σ_w² I) (option ``eval=private``).

Why the seed paper's Lemma 3 does not cover its own Algorithm 1 (and why we clip)
-----------------------------------------------------------------------------------
Lemma 3 bounds the passive stream's sensitivity through Lemma 2's weight drift
Δw_T <= 2eηL/b, which needs every per-row gradient of the passive block to be at most L·||x||.
But the passive party's gradient is h~_i·x_i with h~_i = h_i + Z_A,i: for the changed row the
Gaussian term does not cancel, so the drift is unbounded (an audit measured shifts up to 2.4x the
Δ_B in use, in a third of draws). Clipping h~ to [-c, c] bounds every per-row gradient by c·||x||.

The argument, by adaptive composition (each party's stream on its own)
----------------------------------------------------------------------
Privacy unit ``party-row``: one row of one party's block changes (for the active party: its
columns and its label). The stream of party k is analysed against everyone else, who may choose
everything party k receives (even maliciously) as a function of what it has seen. By the
adaptive composition of Gaussian mechanisms (Gaussian DP, Dong, Roth & Su 2019, Thm 3.2), a
sequence of releases f_t(D; o_<t) + N(0, σ²I) is μ-GDP with μ² = Σ_t Δ_t²/σ², where Δ_t bounds
||f_t(D; o_<t) - f_t(D'; o_<t)|| for EVERY history o_<t. So we bound each step's sensitivity with
the history held fixed — the same received values in both worlds. (The audit's "coupled noise"
simulation lets the received values differ between worlds; that shift is not what the privacy
loss depends on. ``tests/test_hdp_privacy.py`` replays one history against both datasets.)

Passive party k (Δ_B). With the received h~ fixed, a step maps w -> P(w - (η/b)Σ_i clip(h~_i)·x_i)
where P (L2 shrink, L1/elastic-net prox, projection onto ||w|| <= k) is non-expansive when
ηλ <= 2. For a batch without the changed row j the subtracted vector is the same in both worlds,
so ||w - w'|| does not grow; a batch with row j adds at most (η/b_j)·c·||x_j - x'_j|| <= 2ηc/b_min.
So after the m-th visit of row j (once per epoch) the drift is at most d_m = 2mηc/b_min — no
smoothness, convexity or learning-rate bound is needed. Releases of epoch m: each unchanged entry
moves by |x_i·(w - w')| <= d_m (||x_i|| <= 1); the entry of row j by
|w·x_j - w'·x'_j| <= d_{m-1} + 2k (its weights are those before the visit, ||w'|| <= k). So

    Δ_B,m² = (n - 1)·d_m² + (d_{m-1} + 2k)²,        Δ_B² = Σ_{m=1..e} Δ_B,m².

Active party (Δ_A). With the received IR~ fixed, θ_i = x_i·w + b + s_i (s_i fixed, any value),
and the active step is a gradient step on the convex, β_θc²-smooth objective Σ ℓ(x_i·w + b + s_i)
(every loss we allow has a derivative that is monotone and β_θ-Lipschitz for EVERY θ), so batches
without row j are non-expansive when η <= 2/(β_θc² + λ) (co-coercivity; Lemma 2's Case 1), and a
batch with it adds at most 2ηcL/b_min (Case 2): d_m = 2mηcL/b_min (c = sqrt(2) with the bias as a
weight on a constant 1 or a free bias — see below — else 1). Unchanged entries of h move by at
most β_θ·c·d_m; the changed row's by β_θ·c·d_{m-1} + 2(β_θk + β_y·k_y) (Lemma 4's jump). So

    Δ_A,m² = (n - 1)·(β_θ c d_m)² + (β_θ c d_{m-1} + 2β_θk + 2β_y k_y)².

Compared with the paper's closed forms (Lemmas 3-4, T·b·Δw_T² + e(4kΔw_T + 4k²) with the final
drift at every step) the per-epoch sum is smaller by about a factor 3 in the drift term and holds
for the algorithm as run. Row j may sit in the first batch of every epoch, so every unchanged
entry of epoch m is bounded with d_m.

Scoring (``eval=private``). After training each passive party releases its weights once more,
as noisy weights w~_k = w_k + N(0, σ_w² I), and scores the test rows with them: the active party
receives X_k,test·w~_k. With the history fixed, a changed training row moves w_k by at most d_e
(the drift above), so the weight release is one more Gaussian release of party k with
sensitivity d_e, composed with its stream; the scores are post-processing of it. (Noising the
scores instead would need noise of the order of 2k per score to cover the test rows themselves,
which leaves nothing of the prediction.) The scores reveal the test rows' own columns through
a DP model — test rows are not training data, the unit does not cover them, and the record says
so in ``outside_guarantee``. Plain scoring sends X_k,test·w_k with the exact weights: w_k is not a
DP output (it is computed from party k's exact rows), so the passive party's guarantee does not
hold and the record voids ε.

The bias
--------
``intercept=clipped`` (a constant column 1 at the active party, clipped with w_A) and
``intercept=free`` (the active party's own scalar, updated with the exact mean derivative, never
clipped) give the same active-side constants with c = sqrt(2): the augmented row (x, 1) has norm
<= sqrt(2), the objective is β_θc²-smooth in z = (w, b), clipping only w is a projection onto a
convex set, and the jump does not involve the bias (it is the same on both rows). IR_B contains no
bias, so the passive side keeps ||x|| <= 1.
"""

from __future__ import annotations

import math

from securevfl.errors import ConfigError, check_int, check_positive


def epoch_drifts(*, epochs: int, lr: float, grad_bound: float, min_batch: int) -> list[float]:
    """d_0..d_e: the weight drift after m visits of the changed row, 2·m·η·G/b_min."""
    check_int("epochs", epochs, minimum=1)
    check_positive("lr", lr)
    check_positive("grad_bound", grad_bound)
    check_int("min_batch", min_batch, minimum=1)
    step = 2.0 * lr * grad_bound / min_batch
    return [m * step for m in range(epochs + 1)]


def passive_epoch_sensitivities(
    *, epochs: int, rows: int, lr: float, derivative_clip: float, k: float, min_batch: int
) -> list[float]:
    """Δ_B,m for m = 1..e: the passive stream's sensitivity in each epoch (module docstring)."""
    check_int("rows", rows, minimum=1)
    check_positive("k", k)
    d = epoch_drifts(epochs=epochs, lr=lr, grad_bound=derivative_clip, min_batch=min_batch)
    return [
        math.sqrt((rows - 1) * d[m] ** 2 + (d[m - 1] + 2.0 * k) ** 2) for m in range(1, epochs + 1)
    ]


def active_epoch_sensitivities(
    *,
    epochs: int,
    rows: int,
    lr: float,
    L: float,
    k: float,
    beta_theta: float,
    beta_y: float,
    k_y: float,
    min_batch: int,
    feature_norm: float = 1.0,
) -> list[float]:
    """Δ_A,m for m = 1..e: the active stream's sensitivity in each epoch (module docstring)."""
    check_int("rows", rows, minimum=1)
    check_positive("k", k)
    check_positive("beta_theta", beta_theta)
    check_positive("beta_y", beta_y, strict=False)
    check_positive("k_y", k_y, strict=False)
    c = check_positive("feature_norm", feature_norm)
    d = epoch_drifts(epochs=epochs, lr=lr, grad_bound=c * L, min_batch=min_batch)
    beta_w = beta_theta * c
    jump = 2.0 * (beta_theta * k + beta_y * k_y)
    return [
        math.sqrt((rows - 1) * (beta_w * d[m]) ** 2 + (beta_w * d[m - 1] + jump) ** 2)
        for m in range(1, epochs + 1)
    ]


def weight_sensitivity(*, epochs: int, lr: float, derivative_clip: float, min_batch: int) -> float:
    """Δ of a passive party's final weights under a fixed history: d_e = 2·e·η·c/b_min."""
    return epoch_drifts(epochs=epochs, lr=lr, grad_bound=derivative_clip, min_batch=min_batch)[-1]


def max_stable_lr(*, beta_theta: float, lam: float, feature_norm: float = 1.0) -> float:
    """Largest η for which the active step is non-expansive: 2 / (β_θ·c² + λ)."""
    c = check_positive("feature_norm", feature_norm)
    return 2.0 / (
        check_positive("beta_theta", beta_theta) * c * c + check_positive("lam", lam, strict=False)
    )


def check_lr(lr: float, *, beta_theta: float, lam: float, feature_norm: float = 1.0) -> None:
    """Raise ConfigError when η exceeds 2/(β_θ·c² + λ) (the active bound would not hold)."""
    bound = max_stable_lr(beta_theta=beta_theta, lam=lam, feature_norm=feature_norm)
    if lr > bound * (1.0 + 1e-12):  # c = sqrt(2) squares to 2 only up to rounding
        raise ConfigError(
            f"lr must be <= 2/(beta_theta*c^2 + lam) = {bound:.4g} for HDP-VFL's sensitivity "
            f"bound (non-expansive active steps, c = {feature_norm:.4g}), got {lr}"
        )
