"""secureboost-dp's release-step audit: the noisy bin sums of the canary row the label holder opens.

What the label holder decrypts of partner k's reply at one tree level is, per (node, column,
bin), the exact fixed-point sum of the rows' (g, h) plus the noise k added under encryption
(``secureboost_protocol.noise_slots``): Paillier's product of ciphertexts is the sum of the
plaintexts, and the packing into slots is exact below the slot width, so the decrypted reply IS
that plaintext (``tests/test_audit_boost.py`` checks the encrypted path against it, value for
value, with a seeded generator). The probe therefore draws the releases with the protocol's own
noise function, the run's σ and bounds and the run's noise generator (divided in an
under-noised variant), without paying a Paillier encryption, packing and decryption per draw
(seconds per thousand draws at 2048 bits, where an audit needs tens of thousands).

The canary (Nasr et al. 2021, a worst-case input at the point of release): party
``CANARY_PARTY``'s row sits in bin 0 of every column it sends (world 0) or in bin 1 (world 1),
with the (g, h) the accountant bounds, (C_g, C_h), so that each of its columns moves (C_g, C_h)
from one bin to another: the difference is exactly the sensitivity ``2 sqrt(columns)`` of
``privacy.boost_dp`` (normalised units). The other rows' sums are the same in both worlds
and independent of it, so the auditor reads only the canary's two bins per column: per release
4 numbers per column, the g and h sums of bins 0 and 1. Whole run: every tree and level at
which partners release (partner trees x depth, as the accountant composes them).

Not in this view (outside the guarantee, named in the record): the row partitions the label
holder learns at partner splits, and the scoring paths.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from securevfl.audit.view import CANARY_PARTY
from securevfl.errors import ConfigError


def boost_probe(ctx: Any, cfg: Any, *, whole_run: bool) -> tuple[str, Any, np.ndarray]:
    """The probe of a finished secureboost-dp run (``cfg``: its ``BoostConfig``) as
    ``ReleaseProbe``'s (describe, draw, direction)."""
    from securevfl.methods import secureboost_protocol as sp

    if cfg.noise_multiplier is None:
        raise ConfigError("the release audit reads secureboost-dp's noisy bin sums: no noise ran")
    releases = cfg.partner_trees() * cfg.depth if whole_run else 1
    F = cfg.columns_used(ctx.info.features_per_party[CANARY_PARTY])
    cg, ch = cfg.grad_bounds()
    s = float(cfg.noise_multiplier)
    rng = ctx.noise_rng(CANARY_PARTY, "secureboost/noise")  # the run's kind (under-noised too)
    scale = 2.0**sp.FRAC_BITS
    canary = np.rint(np.array([cg, ch]) * scale)  # its fixed-point (g, h), as encrypted

    def draw(worlds: np.ndarray) -> np.ndarray:
        n = len(worlds)
        place = np.zeros((n, F, 2, 2))  # (trial, column, bin, g/h)
        place[np.arange(n), :, worlds.astype(np.int64), :] = canary
        out = [
            (place + sp.noise_slots((rng, s * cg, s * ch), n * F * 2).reshape(n, F, 2, 2)) / scale
            for _ in range(releases)
        ]
        return np.concatenate([o.reshape(n, -1) for o in out], axis=1)

    one = np.tile(np.array([[-cg, -ch], [cg, ch]]), (F, 1, 1)).ravel()  # world 1 minus 0
    where = f"at each of the run's {releases} partner releases" if whole_run else "at one release"
    return (
        f"the noisy (g, h) bin sums the label holder decrypts of partner {CANARY_PARTY}'s "
        f"{F} columns {where} (noise σ·C_g = {s * cg:.3g}, σ·C_h = {s * ch:.3g}); the canary "
        f"row moves (C_g, C_h) = ({cg:g}, {ch:g}) from bin 0 to bin 1 of every column",
        draw,
        np.tile(one, releases),
    )
