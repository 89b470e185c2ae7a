"""Which coalitions a method's ε holds against, and in which neighbouring relation, as its
record states them (issue 42 items 1 and 4).

A DP release is DP against whoever combines it (post-processing), so where every release is
noised by the party that owns the rows before it leaves, the ε holds against any coalition of
the other parties. Where the noise is split over several parties (PBM's trials summed under
secure aggregation; fm-vfl's noise entered into shares) a coalition that knows some of the
shares sees a release with less noise, and the claim names the coalitions it covers.
"""

from __future__ import annotations

from typing import Any

# the neighbouring relation every DP method's ε is computed in (a method that analyses another
# says so in its report's own ``relation``): n is public, so a record may print the sizes and
# what follows from them (σ, steps, byte counts), which replace-one neighbours share
REPLACE_ONE = (
    "replace-one: one row of the unit (and its label, where the unit holds it) replaced by "
    "another; n is public"
)

LOCAL_NOISE = (
    "any coalition of parties other than the protected one (server and eavesdroppers "
    "included): each release is noised by the party owning the rows before it leaves"
)
POOLED = (
    "anyone who sees the released model or outputs, in any coalition; the one data holder "
    "sees every row (a pooled reference, not federated)"
)
SPLIT_NOISE = {
    "pbm-vfl": (
        "the server alone, any data party alone, and data parties without the server (they see "
        "only sums). Not the server with another data party: that coalition subtracts the "
        "colluder's PBM trials and sees one party's noise only: its ε is "
        "privacy.coalition_epsilon (release-once schedule; docs/threat-model.md#pbm-vfl)"
    ),
    "fm-vfl": (
        "any coalition of at most t MPyC parties (honest majority) and anyone who sees the "
        "opened noisy objective; t + 1 colluders also see exact cross-party products"
    ),
}


def coalitions(method: Any) -> str:
    """The coalitions ``method``'s printed ε holds against."""
    if method.name in SPLIT_NOISE:
        return SPLIT_NOISE[method.name]
    return POOLED if method.pooled_data else LOCAL_NOISE
