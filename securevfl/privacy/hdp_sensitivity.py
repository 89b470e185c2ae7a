"""L2 sensitivities of HDP-VFL's intermediate-result streams (Lemmas 2-4 of the HDP-VFL paper).

What we concluded from the proofs in Appendix B (the extracted statements are garbled):

* Lemma 2 (B.1). Two runs on neighbouring data share every minibatch and every noise draw
  (coupling). A step whose batch does not contain the changed row is non-expansive when
  η <= 2/β (β: smoothness of the per-sample loss in w, here β_θ·||x||² + λ <= β_θ + λ); a step
  whose batch contains it grows ||w - w'|| by at most 2ηL/b (two gradients of norm <= L, averaged
  over b). Each row appears once per epoch, so after T = e·r steps Δw_T <= 2eηL/b.
* Lemma 3 (B.2, passive party, IR_B = X_B w_B). A step without the changed row moves each of its
  b entries by at most ||x||·Δw <= Δw, i.e. b·Δw² in squared norm; a step with it adds
  (Δw + 2k)² - Δw² = 4kΔw + 4k² for that entry (|w·x - w'·x'| <= Δw + k·||x - x'|| <= Δw + 2k).
  Summed over the T steps, e of which contain the row:
      Δ_B² = T·b·Δw_T² + e·(4k·Δw_T + 4k²)
           = 4·T·e²·η²·L²/b + 8·k·e²·η·L/b + 4·k²·e.
  This is the issue's reading; the 1/b factors come from substituting Δw_T = 2eηL/b.
* Lemma 4 (B.3, active party, IR_A = h(θ, y) = ∂ℓ/∂θ). h is β_θ-Lipschitz in θ, so in w with
  constant β_w = β_θ, in x with β_x = β_θ·k, and β_y-Lipschitz in y with |y - y'| <= 2k_y.
  Unchanged rows give b·(β_θΔw)²; the step with the changed row adds
  2·(2β_θk + 2β_yk_y)·β_θΔw + (2β_θk + 2β_yk_y)². Summed and with Δw_T = 2eηL/b:
      Δ_A² = 4·β_θ²·L²·T·e²·η²/b + 8·(β_θk + β_yk_y)·β_θ·L·e²·η/b + 4·(β_θk + β_yk_y)²·e.
  Again the issue's reading.

The intercept (our trainer's bias at the active party, absent from Algorithm 1) is a weight on a
constant feature 1, so the augmented row x~ = (x, 1) has ||x~|| <= c = sqrt(2) and the bias is not
clipped. Re-running the proofs with it: gradients have norm <= c·L and the loss is β_θ·c²-smooth in
the weights (so Δw_T <= 2eηcL/b and η <= 2/(β_θc² + λ)); h moves by <= β_θ·c·Δw when only the
weights differ (β_w = cβ_θ); and the changed-row terms are unchanged because the constant feature
is the same on both rows and IR_B does not contain the bias. ``feature_norm`` = c (1: no
intercept, which gives the paper's formulas).

A free bias (option ``intercept=free``: the active party's own scalar b, updated with the exact
mean derivative and never clipped) keeps exactly the same constants. Checked step by step against
Appendix B, with the parameter z = (w, b) and the augmented row x~ = (x, 1), ||x~|| <= c = sqrt(2):
* B.1 (Lemma 2). Case 1 uses co-coercivity of ∇ℓ in z (smoothness β_θ·c², hence η <= 2/(β_θc²+λ))
  and then a projection; clipping only w is the Euclidean projection onto the convex set
  {||w|| <= k} x R (b unconstrained), and the L2 prox on w alone is a prox of a convex function
  of z: both non-expansive, so Case 1 still gives Δz_{t+1} <= Δz_t. Case 2 adds two per-sample
  gradients of norm |ℓ'|·||x~|| <= c·L, so Δz_T <= 2eηcL/b: the same drift as the clipped
  constant column. No bound on |b| is needed anywhere (|ℓ'| <= L holds for every θ for the
  logistic loss; for the other losses the bounded-θ constants are what ``ClippedGLMLoss``
  enforces by clipping θ, whatever the bias).
* B.2 (Lemma 3). IR_B = X_B w_B contains no bias: Case 1 |x_B·(w_B - w'_B)| <= ||Δz||, Case 2
  |w x - w' x'| <= Δz + 2k needs only ||w_B|| <= k. Δ_B as for the clipped bias.
* B.3 (Lemma 4). θ = x·w + b, so |h(z) - h(z')| <= β_θ·|x~·(z - z')| <= β_θ·c·Δz (β_w = cβ_θ);
  the changed-row term |h(x, y) - h(x', y')| at equal z involves (x - x')·w_A with the bias
  cancelling (it is the same on both rows), so β_x = β_θ·k with ||w_A|| <= k. Δ_A as for the
  clipped bias.
So the unclipped bias costs no extra noise; what clipping the bias with w_A bought (the bias
cannot run away under θ-noise) is an accuracy matter, not a privacy one.

Two generalisations the paper does not need but our batching does: a trailing batch smaller than
``b`` (the changed row may sit in it every epoch, so Δw_T uses the smallest batch ``b_min``), and
the number of row-visits ``T·b`` which becomes ``n·e`` when the last batch is short. With equal
batches both reduce exactly to the formulas above.
"""

from __future__ import annotations

import math

from securevfl.errors import ConfigError, check_int, check_positive


def weight_drift(
    *, epochs: int, lr: float, L: float, min_batch: int, feature_norm: float = 1.0
) -> float:
    """Lemma 2: bound on ||w_T - w'_T|| between neighbouring datasets, 2·e·η·c·L/b_min."""
    check_int("epochs", epochs, minimum=1)
    check_positive("lr", lr)
    check_positive("L", L)
    check_int("min_batch", min_batch, minimum=1)
    c = check_positive("feature_norm", feature_norm)
    return 2.0 * epochs * lr * c * L / min_batch


def _visits(iterations: int, batch_size: int, rows_per_epoch: int | None, epochs: int) -> int:
    check_int("iterations", iterations, minimum=1)
    check_int("batch_size", batch_size, minimum=1)
    if rows_per_epoch is None:
        return iterations * batch_size
    check_int("rows_per_epoch", rows_per_epoch, minimum=1)
    return rows_per_epoch * epochs


def passive_sensitivity(
    *,
    iterations: int,
    epochs: int,
    batch_size: int,
    lr: float,
    L: float,
    k: float,
    min_batch: int | None = None,
    rows_per_epoch: int | None = None,
    feature_norm: float = 1.0,
) -> float:
    """Lemma 3: L2 sensitivity Δ_B of a passive party's whole IR stream [X_B w_B]_{t=1..T}.

    Parameters
    ----------
    iterations, epochs, batch_size : T = e·r, e and b of Algorithm 1.
    lr, L, k : learning rate η, Lipschitz constant of the loss in w, weight-norm bound.
    min_batch, rows_per_epoch : smallest batch and rows per epoch when the last batch is short.
    feature_norm : bound c on the augmented row norm (sqrt(2) with an intercept, else 1).
    """
    check_positive("k", k)
    b_min = batch_size if min_batch is None else min_batch
    dw = weight_drift(epochs=epochs, lr=lr, L=L, min_batch=b_min, feature_norm=feature_norm)
    visits = _visits(iterations, batch_size, rows_per_epoch, epochs)
    return math.sqrt(visits * dw**2 + epochs * (4.0 * k * dw + 4.0 * k**2))


def active_sensitivity(
    *,
    iterations: int,
    epochs: int,
    batch_size: int,
    lr: float,
    L: float,
    k: float,
    beta_theta: float,
    beta_y: float,
    k_y: float,
    min_batch: int | None = None,
    rows_per_epoch: int | None = None,
    feature_norm: float = 1.0,
) -> float:
    """Lemma 4: L2 sensitivity Δ_A of the active party's stream of loss derivatives.

    ``beta_theta``, ``beta_y``: Lipschitz constants of ∂ℓ/∂θ in θ and in y; ``k_y``: label bound.
    """
    check_positive("k", k)
    check_positive("beta_theta", beta_theta)
    check_positive("beta_y", beta_y, strict=False)
    check_positive("k_y", k_y, strict=False)
    b_min = batch_size if min_batch is None else min_batch
    dw = weight_drift(epochs=epochs, lr=lr, L=L, min_batch=b_min, feature_norm=feature_norm)
    beta_w = beta_theta * feature_norm
    visits = _visits(iterations, batch_size, rows_per_epoch, epochs)
    jump = 2.0 * (beta_theta * k + beta_y * k_y)  # |h(x,y) - h(x',y')| at equal weights
    return math.sqrt(visits * (beta_w * dw) ** 2 + epochs * (2.0 * jump * beta_w * dw + jump**2))


def max_stable_lr(*, beta_theta: float, lam: float, feature_norm: float = 1.0) -> float:
    """Largest η for which Lemma 2's non-expansiveness holds: 2 / (β_θ·c² + λ)."""
    c = check_positive("feature_norm", feature_norm)
    return 2.0 / (
        check_positive("beta_theta", beta_theta) * c * c + check_positive("lam", lam, strict=False)
    )


def check_lr(lr: float, *, beta_theta: float, lam: float, feature_norm: float = 1.0) -> None:
    """Raise ConfigError when η exceeds 2/(β_θ·c² + λ) (the sensitivity bound would not hold)."""
    bound = max_stable_lr(beta_theta=beta_theta, lam=lam, feature_norm=feature_norm)
    if lr > bound * (1.0 + 1e-12):  # c = sqrt(2) squares to 2 only up to rounding
        raise ConfigError(
            f"lr must be <= 2/(beta_theta*c^2 + lam) = {bound:.4g} for HDP-VFL's sensitivity "
            f"bound (Lemma 2, c = {feature_norm:.4g}), got {lr}"
        )
