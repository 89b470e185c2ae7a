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

from bench.audit_cell import DEFAULT_VARIANTS, parse_variants


def add_audit_parser(sub: Any, add_run_args: Callable[..., None]) -> None:
    p = sub.add_parser(
        "audit",
        help="audit a DP method's ε from outside: an empirical lower bound at 95%% confidence",
        description="Runs the method as `securevfl run` does and distinguishes two neighbouring "
        "datasets (one canary row at opposite extremes) from what the auditor sees: either the "
        "run's own release code fed the canary at its bound many times (view release), or "
        "many whole runs (view run). A test is fitted on part of the trials and its errors on "
        "the rest bound ε from below (Clopper-Pearson, 95%). Under-noised variants (noise "
        "divided by each --variants value; audit only) show how large a violation the audit "
        "would catch. See docs/audit.md.",
    )
    add_run_args(p)
    g = p.add_argument_group("audit")
    g.add_argument(
        "--trials",
        type=int,
        default=None,
        help="trials per variant: canary releases (view release; default 100000) or whole "
        "runs (view run; default 200)",
    )
    g.add_argument(
        "--view",
        choices=("auto", "release", "one-release", "run"),
        default="auto",
        help="release: the method's release code fed a worst-case canary, every release family "
        "of the canary across the run (hdp-vfl, secureboost-dp: every tree level's noisy bin "
        "sums, release-once ldp-vfl / vafl-dp / afe-vfl); "
        "one-release: only the one family the audit used to tap (hdp-vfl's per-step message, "
        "the embedding); run: whole runs with a canary row; auto (default): release where the "
        "method has it",
    )
    g.add_argument(
        "--variant-family",
        default=None,
        metavar="PURPOSE",
        help="the variants divide only the noise of this release family (a noise generator "
        "purpose, e.g. release-once/bottom or hdp/); default: every family",
    )
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
    rounds = f"{rec['epochs']} epochs" if rec.get("trees") is None else f"{rec['trees']} trees"
    print(
        f"audit of {rec['method']} on {rec['dataset']} (K={rec['parties']}, "
        f"{rounds}): claimed ε = {rec['claimed_epsilon']:.4g} "
        f"(δ = {rec['delta']:.3g}); empirical lower bound ε ≥ {rec['epsilon_lower_bound']:.3f} "
        f"at {rec['confidence']:.0%} confidence"
    )
    print(f"  auditor's view: {rec['view']['describe']}; canary: {rec['canary']}")
    r = rec["result"]
    print(
        f"  {r['trials']} trials ({r['fit_trials']} to fit the test); held out: "
        f"{r['test']['false_pos']}/{r['test']['negatives']} false positives, "
        f"{r['test']['false_neg']}/{r['test']['positives']} false negatives; power: the largest "
        f"bound these trials can show is {rec['largest_detectable_epsilon']:.3f} (a larger "
        "violation reads as this)"
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
    from bench.run_args import spec_from_args
    from securevfl.audit import AuditConfig, audit

    spec = spec_from_args(args)
    variants = parse_variants(args.variants)
    bar = None
    progress = None
    if not args.json and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(desc="audit", unit="trial")
        progress = lambda i, n: bar.update(1)  # noqa: E731
    cfg = AuditConfig(
        trials=args.trials, seed=args.audit_seed, view=args.view, family=args.variant_family
    )
    try:
        rec = audit(spec, cfg, variants=variants, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    if args.json:
        print(json.dumps(rec))
    else:
        print_audit(rec)
    return 0
