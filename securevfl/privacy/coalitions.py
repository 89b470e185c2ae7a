"""Which coalitions a method's ε holds against, as its record states it (issue 42 item 4).

A DP release is DP against whoever combines it (post-processing), so where every release is
noised by the party that owns the rows before it leaves, the ε holds against any coalition of
the other parties. Where the noise is split over several parties (PBM's trials summed under
secure aggregation; fm-vfl's noise entered into shares) a coalition that knows some of the
shares sees a release with less noise, and the claim names the coalitions it covers.
"""

from __future__ import annotations

from typing import Any

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
        "colluder's PBM trials and sees one party's noise only, a larger ε than printed "
        "(docs/threat-model.md#pbm-vfl)"
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
