"""The ``securevfl attack NAME --method M [run options]`` command, and ``run --record-view K``.

The run options are the ``run`` command's own (same parser, same RunSpec building); the attack
adds who attacks and how much side knowledge it holds.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from securevfl.errors import ConfigError


def run_recording(spec: Any, party: int, *, processes: bool = False) -> dict[str, Any]:
    """Run ``spec`` in-process with party ``party``'s view recorded; the record says what it got."""
    from securevfl.experiment import run_experiment, validate_spec
    from securevfl.runtime.inprocess import InProcessRuntime
    from securevfl.runtime.view import ViewRecorder

    if processes:
        raise ConfigError("record-view applies to in-process runs, got --processes")
    n = validate_spec(spec).n_parties(spec)
    if not 0 <= party < n:
        raise ConfigError(f"record-view must be a party index in [0, {n}), got {party}")
    rt = InProcessRuntime(n)
    rt.view = ViewRecorder(party)
    with rt:
        return run_experiment(spec, rt)


def add_attack_parser(sub: Any, add_run_args: Callable[..., None]) -> None:
    from bench.method_cards import catalogue

    p = sub.add_parser(
        "attack",
        help="train a method with one party's view recorded and attack that view",
        description="Label inference by a passive party (label-norm, label-direction, "
        "label-aggregate: leak AUC; "
        "model-completion: accuracy), feature inversion by the label holder (inversion: MSE vs "
        "the mean's, SSIM for images), membership inference on the model's outputs "
        "(membership: shadow models; membership-loss: loss threshold; accuracy and AUC).",
    )
    p.add_argument("name", help=f"attack: {', '.join(catalogue().names['attack'])}")
    add_run_args(p)
    g = p.add_argument_group("attack")
    g.add_argument("--attacker", type=int, help="attacking party (default: by attack)")
    g.add_argument("--target", type=int, help="inversion: whose block (default: a passive party)")
    g.add_argument(
        "--known-per-class",
        type=int,
        default=10,
        help="labelled rows per class the label attacker holds; default 10",
    )
    g.add_argument(
        "--score-steps",
        type=int,
        default=16,
        help="label scorings: average each row's first epoch, or this many steps if more; "
        "default 16",
    )
    g.add_argument(
        "--aux-share",
        type=float,
        default=0.1,
        help="inversion: share of training rows whose block the attacker holds; default 0.1",
    )
    g.add_argument(
        "--max-query",
        type=int,
        default=500,
        help="membership: members queried (and as many non-members); default 500",
    )
    g.add_argument("--attack-seed", type=int, help="the attack's own seed; default: --seed, else 0")
    p.add_argument("--json", action="store_true", help="print exactly one JSON attack record")
    p.set_defaults(func=cmd_attack)


def cmd_attack(args: argparse.Namespace) -> int:
    from bench.run_args import spec_from_args
    from securevfl.attacks import AttackConfig, attack_names, run_attack

    if args.name not in attack_names():
        raise ConfigError(f"attack must be one of {attack_names()}, got {args.name!r}")
    spec = spec_from_args(args)
    cfg = AttackConfig(
        attacker=args.attacker,
        target=args.target,
        known_per_class=args.known_per_class,
        score_steps=args.score_steps,
        aux_share=args.aux_share,
        max_query=args.max_query,
        seed=args.attack_seed if args.attack_seed is not None else (spec.seed or 0),
    )
    rec = run_attack(args.name, spec, cfg)
    if args.json:
        print(json.dumps(rec))
        return 0
    m = {**rec["metrics"], **{k: v for k, v in rec["details"].items() if k != "samples"}}
    shown = ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in m.items())
    run = rec["run"]
    eps = "none" if rec["epsilon"] is None else f"{rec['epsilon']:.4g} ({rec['privacy_unit']})"
    acc = ", ".join(f"{k}={v:.4f}" for k, v in run["metrics"].items())
    print(
        f"{rec['attack']} by party {rec['attacker']} on {rec['method']} / {rec['dataset']}: {shown}"
    )
    print(
        f"  run: {acc}; ε {eps}; {rec['time']['run_s']:.2f} s run, "
        f"{rec['time']['attack_s']:.2f} s attack"
    )
    return 0
