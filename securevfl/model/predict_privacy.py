"""What scoring a row releases, and the ε of that release (``securevfl predict``'s record).

A model whose method scores through a plain path (GLM inner products, split-NN embeddings in
the clear) releases each data party's message to the label holder with no noise: no ε covers
the scored rows. A model saved from a private scoring path (``meta.release`` of its parts:
ldp-vfl's Gaussian embeddings, afe-vfl's and vafl-dp's clipped ones, afe-vfl's rescaled by each
party's final DP factor) releases each scored row's message once, with fresh noise, exactly
as a test row was released at training's end; its ε per scored row comes from the project's
accountant (the PLD accountant the training run used) for one such release per passive party;
pbm-vfl's PBM + secure aggregation release is accounted in ``predict_pbm``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from securevfl.disclosure import NOT_A_GUARANTEE

PLAIN_RELEASE = (
    "each data party's message for every scored row (its inner product X_k w_k, or its bottom's "
    "embedding) goes in the clear to the label holder: no ε covers the scored rows"
)


def release_of(parts: dict[int, Any]) -> dict[str, Any] | None:
    """The release descriptor a loaded model's parts carry (None: plain scoring)."""
    for part in parts.values():
        rel = part.meta.get("release")
        if rel is not None:
            return dict(rel)
    return None


def _number(release: dict[str, Any], value: Any, what: str) -> float:
    from securevfl.model.files import ModelFileError

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelFileError(f"a part's release {what} must be a number > 0, got {value!r}")
    v = float(value)
    if not 0 < v < float("inf"):
        raise ModelFileError(f"a part's release {what} must be a number > 0, got {value!r}")
    return v


def check_release(release: dict[str, Any]) -> dict[str, Any]:
    """The release's steps, checked: Gaussian noise σ, and where given the clip (mode, bound C)
    and the rescaling factor; a clip must not claim less than its 2C sensitivity."""
    from securevfl.model.files import ModelFileError
    from securevfl.privacy.afe import CLIPS

    if release.get("mechanism") != "gaussian":
        raise ModelFileError(
            f"a part's release mechanism must be 'gaussian', got {release.get('mechanism')!r}"
        )
    out = {k: _number(release, release.get(k), k) for k in ("sigma", "sensitivity", "delta")}
    clip = release.get("clip")
    if clip is not None:
        mode = clip.get("mode") if isinstance(clip, dict) else None
        if mode not in CLIPS:
            raise ModelFileError(
                f"a part's release clip mode must be in {list(CLIPS)}, got {mode!r}"
            )
        out["clip"] = (mode, _number(release, clip.get("bound"), "clip bound"))
        if out["sensitivity"] < 2 * out["clip"][1] * (1 - 1e-9):
            raise ModelFileError(
                f"a part's release sensitivity must be >= 2 x its clip bound "
                f"{out['clip'][1]:g}, got {out['sensitivity']:g}"
            )
    if release.get("rescale") is not None:
        if clip is None:
            raise ModelFileError("a part's release rescale must come with a clip, got none")
        out["rescale"] = _number(release, release["rescale"], "rescale factor")
    out["rescaled"] = "rescale" in out or bool(release.get("rescaled"))  # each sender its own
    return out


def apply_release(emb: np.ndarray, release: dict[str, Any], rng: Any) -> np.ndarray:
    """A scored row's message as the method released a test row: each row clipped to the
    C-ball (``privacy.afe.CLIPS``, the training code's own), rescaled and clipped again
    (afe-vfl's R: its final DP factor), then N(0, σ²) per coordinate from ``rng``; float64."""
    steps = check_release(release)
    if "clip" in steps:
        import torch

        from securevfl.privacy.afe import CLIPS

        mode, bound = steps["clip"]
        with torch.no_grad():
            t = CLIPS[mode](torch.from_numpy(np.ascontiguousarray(emb)), bound)
            if "rescale" in steps:  # privacy.afe.rescale as the test rows went
                t = CLIPS[mode](steps["rescale"] * t, bound)
        emb = t.numpy()
    return emb + rng.normal(0.0, steps["sigma"], size=emb.shape)


def per_row_epsilon(release: dict[str, Any], *, senders: int) -> dict[str, float]:
    """ε of one scored row: one Gaussian release per passive party (unit party-row: one
    party's block of the row), and all ``senders`` of them (unit sample: the whole row)."""
    from securevfl.privacy.accountant import Accountant
    from securevfl.privacy.events import gaussian_event

    steps = check_release(release)
    ev = gaussian_event(sigma=steps["sigma"], sensitivity=steps["sensitivity"])
    delta = steps["delta"]
    return {
        "party-row": Accountant().compose(ev).get_epsilon(delta),
        "sample": Accountant().compose(ev, max(senders, 1)).get_epsilon(delta),
    }


def scoring_privacy(
    parts: dict[int, Any], *, senders: int, noise_seed: int | None, training: Any
) -> dict[str, Any]:
    """The ``privacy`` entry of a predict record."""
    release = release_of(parts)
    if release is None:
        return {"scored_rows_epsilon": None, "release": PLAIN_RELEASE, "training": training}
    if release.get("mechanism") == "pbm-secagg":  # pbm-vfl: its own accountant
        from securevfl.model.predict_pbm import check_release as check_pbm
        from securevfl.model.predict_pbm import scoring_privacy_pbm

        eps, text, facts = scoring_privacy_pbm(check_pbm(release))
        return _noisy_record(eps, text, facts, noise_seed=noise_seed, training=training)
    eps = per_row_epsilon(release, senders=senders)
    steps = check_release(release)
    shaped = ""
    if "clip" in steps:
        shaped = f", clipped to L2 norm <= {steps['clip'][1]:.6g} ({steps['clip'][0]})"
        if steps["rescaled"]:
            shaped += ", rescaled by the party's final DP factor and clipped again"
    text = (
        f"each passive party's embedding of every scored row goes to the label holder once"
        f"{shaped}, plus N(0, {steps['sigma']:.6g}^2) per coordinate (L2 sensitivity "
        f"{steps['sensitivity']:.6g}), fresh noise, as a test row at training's end"
    )
    facts = {
        "delta": float(release["delta"]),
        "mechanism": "gaussian",
        "sigma": float(release["sigma"]),
        "sensitivity": float(release["sensitivity"]),
    }
    return _noisy_record(eps, text, facts, noise_seed=noise_seed, training=training)


def _noisy_record(
    eps: dict[str, float],
    text: str,
    facts: dict[str, Any],
    *,
    noise_seed: int | None,
    training: Any,
) -> dict[str, Any]:
    """The record of a noisy scoring release: its ε per scored row (unit party-row; every unit
    in ``by_unit``), the mechanism's ``facts``, the training run's record."""
    out = {
        "scored_rows_epsilon": eps["party-row"],
        "unit": "party-row",
        "by_unit": eps,
        **facts,
        "noise": "aes-ctr-csprng",
        "release": text,
        "training": training,
    }
    if noise_seed is not None:  # seeded noise protects nothing: no ε may be printed
        out.update(
            scored_rows_epsilon=None,
            by_unit=None,
            noise="pcg64 (seeded)",
            not_a_guarantee=NOT_A_GUARANTEE,
        )
    return out
