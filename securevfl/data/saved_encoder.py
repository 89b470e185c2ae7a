"""A party's CSV encoder as its part of a saved model stores it (``columns.encoder`` in the card),
and the checks a loaded one passes before predict applies it (:mod:`securevfl.data.csv_columns`
states the rules themselves)."""

from __future__ import annotations

from collections.abc import Sequence

from securevfl.data.csv_columns import ColumnRule, is_missing
from securevfl.errors import DataError

MAX_RULE_CATEGORIES = 100_000  # a saved encoder is metadata: its size is bounded


def rules_to_json(rules: Sequence[ColumnRule]) -> list[dict]:
    """The rules as the model card stores them."""
    return [
        {
            "name": r.name,
            "kind": "numeric" if r.categories is None else "categorical",
            "categories": None if r.categories is None else list(r.categories),
            "missing_indicator": r.indicator,
        }
        for r in rules
    ]


def rules_from_json(doc: object, where: str) -> list[ColumnRule]:
    """A card's saved rules, checked (DataError naming the rule broken): names distinct
    strings, a kind, categories distinct non-blank strings (at most MAX_RULE_CATEGORIES in all)."""
    if not isinstance(doc, list):
        raise DataError(f"{where}: the encoder must be a list of columns, got {type(doc).__name__}")
    rules, total = [], 0
    for i, c in enumerate(doc):
        ok = isinstance(c, dict) and isinstance(c.get("name"), str) and c["name"]
        ok = ok and c.get("kind") in ("numeric", "categorical")
        ok = ok and isinstance(c.get("missing_indicator"), bool)
        cats = c.get("categories") if ok else None
        if ok and c["kind"] == "categorical":
            ok = isinstance(cats, list) and bool(cats) and len(set(map(str, cats))) == len(cats)
            ok = ok and all(isinstance(v, str) and not is_missing(v) for v in cats)
            total += len(cats) if ok else 0
        elif ok:
            ok = cats is None
        if not ok or total > MAX_RULE_CATEGORIES:
            raise DataError(
                f"{where}: encoder column {i} must be {{name, kind numeric|categorical, "
                f"categories (distinct non-blank strings, <= {MAX_RULE_CATEGORIES} in all), "
                f"missing_indicator true|false}}, got {str(c)[:120]}"
            )
        rules.append(
            ColumnRule(c["name"], None if cats is None else tuple(cats), c["missing_indicator"])
        )
    if len({r.name for r in rules}) != len(rules):
        raise DataError(
            f"{where}: encoder column names must be distinct, got {[r.name for r in rules]}"[:300]
        )
    return rules
