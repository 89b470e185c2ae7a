"""The arguments of ``securevfl run`` / ``party``: the common options and one method's own.

Both come from declarations (:data:`securevfl.run_options.COMMON_OPTIONS` and ``Method.options``),
so ``securevfl run METHOD --help`` shows each option with its kind, range and default, and the
values are parsed and checked in one place (:func:`securevfl.run_options.build_spec`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from securevfl.context import RunSpec
from securevfl.options import dash
from securevfl.registry import lookup, names
from securevfl.run_options import COMMON_OPTIONS, build_spec

GROUPS = {
    "data": (
        "dataset",
        "id_column",
        "bounds",
        "parties",
        "partition",
        "n",
        "d",
        "sparsity",
        "encoding",
    ),
    "training": (
        "model",
        "epochs",
        "batch_size",
        "lr",
        "loss",
        "penalty",
        "lam",
        "embedding_dim",
        "hidden",
        "aggregation",
        "seed",
    ),
    "privacy": ("epsilon", "delta", "reproducible_noise"),
    "runtime": ("timeout",),
}
_PREFIX = "opt__"  # argparse dest of a method option: kept apart from the common fields


def _help(text: str) -> str:
    """An option's description as argparse help (which %-formats it: "15%" must be "15%%")."""
    return text.replace("%", "%%")


def method_in(argv: Sequence[str]) -> str | None:
    """The method a ``run``/``party`` command line names (its first registered name), if any."""
    known = set(names("method"))
    return next((a for a in argv[1:] if a in known), None)


def add_run_args(
    p: argparse.ArgumentParser, method: str | None, *, method_flag: bool = False
) -> None:
    """Common options, then ``method``'s own; other methods' options parse but are refused.

    ``method_flag``: the method is ``--method M`` (``securevfl attack NAME --method M``, whose
    positional is the attack's name), not the first positional.
    """
    helps = f"method or baseline: {', '.join(names('method'))}"
    if method_flag:
        p.add_argument("--method", required=True, help=helps)
    else:
        p.add_argument("method", help=helps)
    for group, keys in GROUPS.items():
        g = p.add_argument_group(group)
        for key in keys:
            if key == "reproducible_noise":
                g.add_argument(
                    "--reproducible-noise",
                    dest=key,
                    action="store_true",
                    default=None,
                    help=_help(COMMON_OPTIONS[key].help),
                )
                continue
            if key == "center" or COMMON_OPTIONS[key].type is bool:
                continue
            g.add_argument(
                f"--{dash(key)}",
                dest=key,
                metavar=key.upper(),
                help=_help(COMMON_OPTIONS[key].describe()),
            )
        if group == "data":
            g.add_argument(
                "--center",
                action=argparse.BooleanOptionalAction,
                default=None,
                help=COMMON_OPTIONS["center"].help + " (--no-center: off where a method's "
                "default is on)",
            )
    own = lookup("method", method).options if method else {}
    if own:
        g = p.add_argument_group(f"options of method {method}")
        for key, opt in own.items():
            g.add_argument(
                f"--{dash(key)}",
                dest=_PREFIX + key,
                metavar=key.upper(),
                help=_help(opt.describe()),
            )
        own_defaults = lookup("method", method).common_defaults({})
        if own_defaults:
            shown = ", ".join(f"--{dash(k)} {v}" for k, v in own_defaults.items())
            p.epilog = f"{method}'s own defaults of common options: {shown} (see its help)"
    else:
        p.epilog = "method options: securevfl run METHOD --help"
    others = {k for m in names("method") for k in lookup("method", m).options} - set(own)
    for key in sorted(others):  # parsed so that the error can name the method, never shown
        p.add_argument(f"--{dash(key)}", dest=_PREFIX + key, help=argparse.SUPPRESS)


def spec_from_args(args: argparse.Namespace) -> RunSpec:
    """The RunSpec of parsed ``run``/``party`` arguments (every value checked by its option)."""
    flat: dict[str, Any] = {"method": args.method}
    for key, value in vars(args).items():
        if value is None:
            continue
        if key.startswith(_PREFIX):
            flat[key[len(_PREFIX) :]] = value
        elif key in COMMON_OPTIONS:
            flat[key] = value
    return build_spec(flat)
