"""Audit cells of bench suites (``audit = "VIEW"`` or ``"VIEW/TRIALS"``) and the parsing of
``--variants``; kept apart from the CLI module so the runner imports no CLI."""

from __future__ import annotations

from typing import Any

from securevfl.errors import ConfigError

DEFAULT_VARIANTS = "2,4,10"


def parse_variants(text: str) -> tuple[float, ...]:
    """'2,4,10' -> (2.0, 4.0, 10.0); '' or 'none' -> (); each must be > 1."""
    if text.strip().lower() in ("", "none"):
        return ()
    out = []
    for part in text.split(","):
        try:
            d = float(part)
        except ValueError:
            msg = f"variants must be numbers > 1 separated by commas, got {text!r}"
            raise ConfigError(msg) from None
        if not d > 1:
            raise ConfigError(f"each variant's noise divisor must be > 1, got {part.strip()!r}")
        out.append(d)
    return tuple(out)


def audit_cell(what: str, spec: Any) -> dict[str, Any]:
    """An audit cell of a bench suite (``audit = "VIEW"`` or ``"VIEW/TRIALS"``, e.g. "run/40"):
    the audit record with the noise/2, /4, /10 variants and the spec's config (for the report)."""
    from securevfl.audit import AuditConfig, audit

    view, _, n = str(what).partition("/")
    try:
        trials = int(n) if n else None
    except ValueError:
        raise ConfigError(f"an audit cell is 'VIEW' or 'VIEW/TRIALS', got {what!r}") from None
    cfg = AuditConfig(trials=trials, view=view)
    rec = audit(spec, cfg, variants=parse_variants(DEFAULT_VARIANTS))
    return {**rec, "config": spec.to_config()}
