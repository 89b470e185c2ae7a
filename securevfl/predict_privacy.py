"""What scoring a row releases, and the ε of that release (``securevfl predict``'s record).

A model whose method scores through a plain path (GLM inner products, split-NN embeddings in
the clear) releases each data party's message to the label holder with no noise: no ε covers
the scored rows. A model saved from a private scoring path (``meta.release`` of its parts:
ldp-vfl's Gaussian embeddings) releases each scored row's message once, with fresh noise, exactly
as a test row was released at training's end; its ε per scored row comes from the project's
accountant (the PLD accountant the training run used) for one such release per passive party;
pbm-vfl's PBM + secure aggregation release is accounted in ``predict_pbm``.
"""

from __future__ import annotations

from typing import Any

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


def per_row_epsilon(release: dict[str, Any], *, senders: int) -> dict[str, float]:
    """ε of one scored row: one Gaussian release per passive party (unit party-row: one
    party's block of the row), and all ``senders`` of them (unit sample: the whole row)."""
    from securevfl.privacy.accountant import Accountant
    from securevfl.privacy.events import gaussian_event

    if release.get("mechanism") != "gaussian":
        from securevfl.model_io import ModelFileError

        raise ModelFileError(
            f"a part's release mechanism must be 'gaussian', got {release.get('mechanism')!r}"
        )
    ev = gaussian_event(sigma=float(release["sigma"]), sensitivity=float(release["sensitivity"]))
    delta = float(release["delta"])
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
        from securevfl.predict_pbm import check_release, scoring_privacy_pbm

        return scoring_privacy_pbm(check_release(release), noise_seed=noise_seed, training=training)
    eps = per_row_epsilon(release, senders=senders)
    text = (
        f"each passive party's embedding of every scored row goes to the label holder once, "
        f"plus N(0, {float(release['sigma']):.6g}^2) per coordinate (L2 sensitivity "
        f"{float(release['sensitivity']):.6g}), fresh noise, as a test row at training's end"
    )
    out = {
        "scored_rows_epsilon": eps["party-row"],
        "unit": "party-row",
        "delta": float(release["delta"]),
        "by_unit": eps,
        "mechanism": "gaussian",
        "sigma": float(release["sigma"]),
        "sensitivity": float(release["sensitivity"]),
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
