"""The release-step audit: the method's own release code, fed a worst-case canary, many times.

A run of the method (``run_experiment``, as ``securevfl run`` runs it) hands its trainer's hooks to
the audit (``AuditTap.saw``): the same objects, with the noise scale the run calibrated and the
noise generator the run drew from (the CSPRNG; divided by the variant's divisor in an
under-noised variant). The audit then calls the hooks' release function on a canary placed at
the bound the accountant assumes, on one side (world 1) or the other (world 0), and reads what
the receiver gets. This is Nasr et al.'s (2021) strongest adversary (a worst-case input at the
point of release), and it makes each trial cost one noise draw instead of a training run, so
thousands of trials bound ε far above what whole runs can reach. What it does not audit: that
the data really stays inside the bound (the clipping code runs, but the canary is placed at it).

- hdp-vfl: passive party 1's noisy intermediate result ``x·w_B + N(0, σ_B²)`` of one row, at each
  of the run's T steps (``HDPHooks.passive_message``); the row's noiseless value is ±k (a unit
  row along w_B at the clip norm k: the per-row part 2k of the plan's sensitivity).
- ldp-vfl, vafl-dp, afe-vfl: passive party 1's noisy embedding of one row
  (``embed`` then ``party_message``); the row's bottom output at opposite corners of the bound
  (tanh: ±1 on every coordinate; a clip to the C-ball: ±C/√P on every coordinate), one release
  per row (the release-once schedule). ldp-vfl and vafl-dp: a training row's release; afe-vfl:
  a test row's (its training release also rescales by released batch statistics).
- secureboost-dp: the noisy bin sums of partner 1's columns the label holder decrypts at every
  tree level (``securevfl.audit.boost_release``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from securevfl.audit.boost_release import boost_probe
from securevfl.audit.view import CANARY_PARTY
from securevfl.errors import ConfigError
from securevfl.training.loop import EVAL, TRAIN, Batch

BIG = 1e6  # a bottom output far outside the bound: the method's own bounding puts it at a corner


@dataclass(frozen=True)
class ReleaseProbe:
    """``draw(worlds)``: one row per trial, the numbers the receiver got about the canary;
    ``direction``: the likelihood-ratio direction (world 1 minus world 0, noiseless)."""

    describe: str
    draw: Callable[[np.ndarray], np.ndarray]
    direction: np.ndarray


SPLIT_NN_PHASE = {"ldp-vfl": TRAIN, "vafl-dp": TRAIN, "afe-vfl": EVAL}
BOOST = "secureboost-dp"  # its probe: ``securevfl.audit.boost_release``


def has_release_probe(method: Any, spec: Any) -> bool:
    """Whether ``method`` (with ``spec``'s options) has a release-step audit."""
    if method.name in ("hdp-vfl", BOOST):
        return True
    if method.name in SPLIT_NN_PHASE:
        from securevfl.methods.release_options import release_once

        return release_once(spec, method, None)
    return False


def release_probe(method_name: str, seen: list[tuple[Any, Any]]) -> ReleaseProbe:
    """The probe of a finished run from the (ctx, hooks) its trainer handed over: the one
    tapped release family (hdp-vfl's stream, a split-NN's embedding)."""
    if not seen:
        raise ConfigError(f"method {method_name!r} ran no trainer the release audit can read")
    ctx, hooks = seen[-1]
    if method_name == "hdp-vfl":
        return _hdp_probe(ctx, hooks)
    if method_name == BOOST:
        return ReleaseProbe(*boost_probe(ctx, hooks, whole_run=False))
    return _embedding_probe(ctx, hooks, SPLIT_NN_PHASE[method_name])


def whole_run_probe(
    method_name: str, seen: list[tuple[Any, Any]], facts: dict[str, Any]
) -> ReleaseProbe:
    """Every release family of the canary row across the run, each drawn by the method's own
    release code (issue 42 item 7), joined into one likelihood-ratio test: the families are
    independent Gaussians, so the statistic is Σ_f ⟨x_f, Δ_f⟩ / σ_f² with each family's
    noiseless difference Δ_f and its noise σ_f (estimated by the audit on its fit trials,
    ``release_world_trials``). Families:

    - hdp-vfl: the T per-step messages (σ_B) and the noisy scoring weights (σ_w, the canary
      moving w_B by the plan's weight sensitivity along one coordinate);
    - release-once ldp-vfl / vafl-dp (a training row): its one embedding release (σ) and its
      bottom's E DP-SGD releases (the clipped gradient ±C_g, ``noisy_sums``, σ_g·C_g);
      afe-vfl audits a test row, which has one release only;
    - secureboost-dp: partner 1's noisy bin sums at every partner tree and level.

    The centring means (pure Laplace, drawn before training) and the labels' randomized
    response are not in this view."""
    if not seen:
        raise ConfigError(f"method {method_name!r} ran no trainer the release audit can read")
    ctx, hooks = seen[-1]
    if method_name == BOOST:
        return ReleaseProbe(*boost_probe(ctx, hooks, whole_run=True))
    if method_name == "hdp-vfl":
        parts = [_hdp_probe(ctx, hooks)]
        if hooks.plan.sigma_w > 0:
            parts.append(_hdp_weights_probe(ctx, hooks))
        return _joined(parts)
    phase = SPLIT_NN_PHASE[method_name]
    parts = [_embedding_probe(ctx, hooks, phase)]
    plan = facts.get("plan")
    if phase == TRAIN and plan is not None:
        parts.append(_bottom_probe(ctx, plan))
    return _joined(parts)


def _joined(parts: list[ReleaseProbe]) -> ReleaseProbe:
    def draw(worlds: np.ndarray) -> np.ndarray:
        return np.hstack([p.draw(worlds) for p in parts])

    return ReleaseProbe(
        "whole run: " + "; ".join(p.describe for p in parts),
        draw,
        np.concatenate([p.direction for p in parts]),
    )


def _hdp_weights_probe(ctx: Any, hooks: Any) -> ReleaseProbe:
    """Passive party 1's noisy scoring weights (``HDPHooks.score_weights``), one coordinate
    per trial: the canary moves it by ±Δ_w / 2."""
    half = float(hooks.plan.weights) / 2.0

    def draw(worlds: np.ndarray) -> np.ndarray:
        w = np.where(worlds == 1, half, -half).astype(np.float64)
        return np.asarray(hooks.score_weights(ctx, CANARY_PARTY, w), dtype=np.float64)[:, None]

    return ReleaseProbe(
        f"its noisy scoring weights w_B + N(0, σ_w²) (one coordinate moved ±{half:.3g})",
        draw,
        np.array([2.0 * half]),
    )


def _bottom_probe(ctx: Any, plan: Any) -> ReleaseProbe:
    """Party 1's bottom DP-SGD releases of the canary (one per bottom epoch): its clipped
    per-example gradient ±C_g along one coordinate plus the step's noise, drawn by the
    trainer's own ``noisy_sums`` from a generator of the run's kind."""
    from securevfl.training.private_bottom import noisy_sums

    E, C = int(plan.bottom_epochs), float(plan.bottom.clip)
    rng = ctx.noise_rng(CANARY_PARTY, "release-once/bottom")

    def draw(worlds: np.ndarray) -> np.ndarray:
        g = torch.as_tensor(np.where(worlds[:, None] == 1, C, -C) * np.ones((1, E)))
        return noisy_sums({"g": g}, dp=plan.bottom, rng=rng)["g"].numpy().astype(np.float64)

    return ReleaseProbe(
        f"its bottom's {E} DP-SGD releases (clipped gradient ±C_g = ±{C:g}, "
        f"noise σ_g·C_g = {plan.bottom.sigma:.3g})",
        draw,
        np.full(E, 2.0 * C),
    )


def _hdp_probe(ctx: Any, hooks: Any) -> ReleaseProbe:
    T, k = int(hooks.plan.facts["T"]), float(hooks.clip)

    def draw(worlds: np.ndarray) -> np.ndarray:
        ir = np.where(worlds == 1, k, -k).astype(np.float64)
        return np.stack([hooks.passive_message(ctx, CANARY_PARTY, ir, t) for t in range(T)], axis=1)

    return ReleaseProbe(
        f"passive party {CANARY_PARTY}'s noisy intermediate result x·w_B + N(0, σ_B²) of the "
        f"canary row at each of the run's {T} steps, its noiseless value ±k = ±{k:g} "
        "(a unit row along w_B at the clip norm)",
        draw,
        np.full(T, 2.0 * k),
    )


def _embedding_probe(ctx: Any, hooks: Any, phase: str) -> ReleaseProbe:
    P = int(ctx.spec.embedding_dim)

    def bounded(worlds: np.ndarray) -> np.ndarray:
        """The canary rows' embeddings as the method bounds them (no noise)."""
        raw = torch.as_tensor(np.where(worlds[:, None] == 1, BIG, -BIG) * np.ones((1, P)))
        raw = raw.float()
        if hooks.bounded_embeddings:  # the bottom's own tanh
            raw = torch.tanh(raw)
        with torch.no_grad():
            return hooks.embed(ctx, CANARY_PARTY, raw, 0).numpy()

    def draw(worlds: np.ndarray) -> np.ndarray:
        n = len(worlds)
        hooks.begin_batch(ctx, Batch(phase, 0 if phase == TRAIN else None, 0, 0, 0, n, n))
        out = hooks.party_message(ctx, CANARY_PARTY, bounded(worlds), 0)
        return np.asarray(out, dtype=np.float64).reshape(n, -1)

    ends = bounded(np.array([0, 1]))
    which = "a training row's one release" if phase == TRAIN else "a test row's one release"
    return ReleaseProbe(
        f"passive party {CANARY_PARTY}'s noisy embedding of the canary row ({which}, the "
        f"release-once schedule), its bottom output at opposite corners of the bound "
        f"(‖difference‖ = {float(np.linalg.norm(ends[1] - ends[0])):.3g})",
        draw,
        (ends[1] - ends[0]).astype(np.float64),
    )
