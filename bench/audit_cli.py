"""The ``securevfl audit METHOD [run options]`` command: an empirical lower bound on ε.

The run options are ``run``'s own (same parser, same RunSpec); the audit adds the number of
trials and the under-noised variants that show its power. ``run`` has no way to under-noise.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
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


def add_audit_parser(sub: Any, add_run_args: Callable[..., None]) -> None:
    p = sub.add_parser(
        "audit",
        help="audit a DP method's ε from outside: an empirical lower bound at 95% confidence",
        description="Runs the method as `securevfl run` does, many times, on two neighbouring "
        "datasets (one canary row at opposite extremes), records what the auditor sees, fits a "
        "test on a quarter of the trials and bounds ε from its errors on the rest "
        "(Clopper-Pearson). Under-noised variants (noise divided by each --variants value; "
        "audit only) show how large a violation the audit would catch. See docs/audit.md.",
    )
    add_run_args(p)
    g = p.add_argument_group("audit")
    g.add_argument("--trials", type=int, default=200, help="runs per variant; default 200")
    g.add_argument(
        "--variants",
        default=DEFAULT_VARIANTS,
        help=f"noise divisors of the under-noised variants, or 'none'; default {DEFAULT_VARIANTS}",
    )
    g.add_argument("--audit-seed", type=int, default=0, help="the audit's own seed; default 0")
    p.add_argument("--json", action="store_true", help="print exactly one JSON audit record")
    p.set_defaults(func=cmd_audit)


def print_audit(rec: dict[str, Any]) -> None:
    """The audit in words: the bound beside the claim, then each variant's."""
    print(
        f"audit of {rec['method']} on {rec['dataset']} (K={rec['parties']}, "
        f"{rec['epochs']} epochs): claimed ε = {rec['claimed_epsilon']:.4g} "
        f"(δ = {rec['delta']:.3g}); empirical lower bound ε ≥ {rec['epsilon_lower_bound']:.3f} "
        f"at {rec['confidence']:.0%} confidence"
    )
    print(f"  auditor's view: {rec['view']['describe']}; canary: {rec['canary']}")
    r = rec["result"]
    print(
        f"  {r['trials']} runs ({r['fit_trials']} to fit the test); held out: "
        f"{r['test']['false_pos']}/{r['test']['negatives']} false positives, "
        f"{r['test']['false_neg']}/{r['test']['positives']} false negatives; the largest bound "
        f"these trials can show is {rec['largest_detectable_epsilon']:.3f}"
    )
    for v in rec["variants"]:
        verdict = "CAUGHT (above the claim)" if v["violation"] else "not caught"
        print(
            f"  variant noise / {v['noise_divisor']:g}: ε ≥ {v['epsilon_lower_bound']:.3f} "
            f"against the claimed {v['claimed_epsilon']:.4g}: {verdict}"
        )
    if rec["variants"]:
        k = rec["smallest_divisor_caught"]
        print(
            "  power: "
            + (
                f"a method adding 1/{k:g} of its claimed noise is caught"
                if k is not None
                else "no variant was caught: this audit could not have caught a method adding "
                f"1/{max(v['noise_divisor'] for v in rec['variants']):g} of its noise"
            )
        )
    if rec["epsilon_lower_bound"] > rec["claimed_epsilon"]:
        print("securevfl: warning: the lower bound exceeds the claimed ε", file=sys.stderr)


def cmd_audit(args: argparse.Namespace) -> int:
    from bench.cli import spec_from_args
    from securevfl.audit import AuditConfig, audit

    spec = spec_from_args(args)
    variants = parse_variants(args.variants)
    bar = None
    progress = None
    if not args.json and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(desc="audit", unit="run", total=args.trials * (1 + len(variants)))
        progress = lambda i, n: bar.update(1)  # noqa: E731
    try:
        rec = audit(
            spec, AuditConfig(trials=args.trials, seed=args.audit_seed), variants=variants,
            progress=progress,
        )  # fmt: skip
    finally:
        if bar is not None:
            bar.close()
    if args.json:
        print(json.dumps(rec))
    else:
        print_audit(rec)
    return 0
