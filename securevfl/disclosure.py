"""What the record of a run with an ε may hold: only what the party writing it may see.

The label holder writes the record. In a run with a privacy budget it may hold what was released
(noised), public facts (sizes, the spec, the schedule, costs) and test metrics (the scoring of
test rows is outside every guarantee by design, see docs/privacy-boundaries.md). It may not hold
a hash or a statistic of values that never left their owner: fingerprints of exact weights stay
with the party that owns them, and training statistics computed from exact values are dropped.

``--reproducible-noise`` is the one mode where the noise is drawn from ``--seed``: anyone with
the record (which holds the seed) regenerates it, so such a record prints no ε ("not a
guarantee"), and, since no guarantee is claimed, it keeps fingerprints and statistics so that
runs can be compared bit for bit.
"""

from __future__ import annotations

from typing import Any

from securevfl.context import RunSpec, is_private

NOT_A_GUARANTEE = (
    "not a guarantee: reproducible noise (--reproducible-noise) draws the noise from --seed, "
    "which the record holds, so anyone holding it regenerates the noise; rerun without "
    "--reproducible-noise for an ε"
)

# RunStats fields the label holder computes from its own exact rows and labels (plus what it
# received): unaccounted where its rows are in the privacy unit (HDP-VFL's active party, any
# sample-unit run); where they are not (a server or a featureless active party holding only the
# labels, whose exposure the record lists), they are post-processing of released values
UNRELEASED_STATS = ("epoch_loss", "epoch_accuracy")
# method ``extra`` keys that are statistics of unreleased values: AFE's embedding fill, and the
# release-once head's pick of the label holder's own model (``--own-model auto``: the lower loss
# on held-out exact training labels)
UNRELEASED_EXTRA = ("embedding_fill", "own_model")
# ``privacy`` entries (path below ``privacy``) computed from the label holder's exact rows and
# labels: HDP-VFL's final refit (bias, passive scales) and its deconvolved threshold (from the
# exact derivatives). Withheld wherever the label holder's rows are in a unit
UNRELEASED_PRIVACY = (("stream", "final_fit"), ("stream", "threshold"))
# warnings that report a choice made on exact training labels (the release-once head's
# selection on held-out training rows): withheld wherever a unit includes the label
UNRELEASED_WARNINGS = ("the head did not beat the class shares",)
# what stands in for the fingerprints of a run with an ε
FINGERPRINT_WITHHELD = (
    "withheld: a hash of exact weights would let a holder of the record test candidate rows; "
    "each party keeps its own (rerun with --reproducible-noise to compare runs)"
)


def guarded(spec: RunSpec) -> bool:
    """Whether the record must hold only released values: a private run, noise not seeded."""
    return is_private(spec) and not spec.reproducible_noise


def void_privacy(privacy: dict[str, Any], reason: str) -> dict[str, Any]:
    """``privacy`` with no ε anywhere (headline, per party, per unit) and ``reason`` listed."""
    out = dict(privacy)
    out["epsilon"] = None
    out["per_party"] = {
        k: {**v, "epsilon": None} if isinstance(v, dict) else v
        for k, v in (privacy.get("per_party") or {}).items()
    }
    if "by_unit" in out:
        out["by_unit"] = {}
    out["outside_guarantee"] = [reason, *privacy.get("outside_guarantee", [])]
    out["guarantee"] = "not a guarantee"
    return out


def label_in_a_unit(privacy: dict[str, Any]) -> bool:
    """Whether any ε the record prints covers the label (the ``sample`` unit, headline or not)."""
    return privacy.get("unit") == "sample" or "sample" in (privacy.get("by_unit") or {})


def label_holder_accounted(privacy: dict[str, Any], label_party: int) -> bool:
    """Whether the label holder's own rows or labels are inside any printed unit."""
    return label_in_a_unit(privacy) or str(label_party) in (privacy.get("per_party") or {})


def _withhold_privacy_entries(privacy: dict[str, Any]) -> None:
    """Drop :data:`UNRELEASED_PRIVACY` entries, naming them under ``privacy.withheld``."""
    gone = []
    for path in UNRELEASED_PRIVACY:
        node = privacy
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and path[-1] in node:
            node.pop(path[-1])
            gone.append(".".join(path))
    if gone:
        privacy["withheld"] = [
            f"{name}: computed from the label holder's exact rows and labels" for name in gone
        ]


def scrub_record(record: dict[str, Any], spec: RunSpec, *, label_party: int) -> dict[str, Any]:
    """Apply the rules above to a finished record (in place; returned for chaining)."""
    if not is_private(spec) or record.get("privacy") is None:
        return record
    if spec.reproducible_noise:
        record["privacy"] = void_privacy(record["privacy"], NOT_A_GUARANTEE)
        return record
    if label_holder_accounted(record["privacy"], label_party):
        for key in UNRELEASED_STATS:
            record["stats"].pop(key, None)
        _withhold_privacy_entries(record["privacy"])
    for key in UNRELEASED_EXTRA:
        record["extra"].pop(key, None)
    return record


def scrub_warnings(
    warnings: list[str], record: dict[str, Any], spec: RunSpec, *, label_party: int
) -> list[str]:
    """``warnings`` without :data:`UNRELEASED_WARNINGS` where the record's ε covers the label
    holder's rows or labels (a guarded run); unchanged otherwise."""
    privacy = record.get("privacy")
    if not guarded(spec) or privacy is None or not label_holder_accounted(privacy, label_party):
        return warnings
    return [w for w in warnings if not w.startswith(UNRELEASED_WARNINGS)]
