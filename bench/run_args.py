"""The arguments of ``securevfl run`` / ``party``: the common options and one method's own.

Both come from declarations (:data:`securevfl.run_options.COMMON_OPTIONS` and ``Method.options``),
so ``securevfl run METHOD --help`` shows each option with its kind, range and default, and the
values are parsed and checked in one place (:func:`securevfl.run_options.build_spec`). The
methods' side is read from their cards (:mod:`bench.method_cards`): building this parser imports
no method.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from bench.method_cards import cards, catalogue
from bench.option_groups import COMMON_GROUPS, GROUP_TITLES, group_of
from securevfl.context import RunSpec
from securevfl.options import dash
from securevfl.run_options import COMMON_OPTIONS, build_spec

_PREFIX = "opt__"  # argparse dest of a method option: kept apart from the common fields


def _help(text: str) -> str:
    """An option's description as argparse help (which %-formats it: "15%" must be "15%%")."""
    return text.replace("%", "%%")


def method_in(argv: Sequence[str]) -> str | None:
    """The method a ``run``/``party`` command line names (its first registered name), if any."""
    known = set(cards())
    return next((a for a in argv[1:] if a in known), None)


def add_run_args(
    p: argparse.ArgumentParser, method: str | None, *, method_flag: bool = False
) -> dict[str, Any]:
    """Common options and ``method``'s own, in the groups of :mod:`bench.option_groups` (data,
    privacy, model, training, protocol, output); other methods' options parse but are refused.
    Returns the groups, so a command files its own options (``--save``, ``--json``) with them.

    ``method_flag``: the method is ``--method M`` (``securevfl attack NAME --method M``, whose
    positional is the attack's name), not the first positional.
    """
    every = cards()
    helps = f"method or baseline: {', '.join(every)}"
    if method_flag:
        p.add_argument("--method", required=True, help=helps)
    else:
        p.add_argument("method", help=helps)
    card = every[method] if method else None
    real = card.defaults if card else {}
    own = card.options if card else {}
    if card is not None and not method_flag:
        p.description = card.description
        p.usage = f"%(prog)s {method} [options]  (options by group below)"
    groups = {}
    for group, title in GROUP_TITLES.items():
        mine = [k for k in own if group_of(k) == group]
        desc = f"{method}'s own: " + ", ".join(f"--{dash(k)}" for k in mine) if mine else None
        g = groups[group] = p.add_argument_group(title, desc)
        for key in COMMON_GROUPS[group]:
            _add_common(g, key, method, real)
        if group == "data":
            on = real.get("center", False)
            g.add_argument(
                "--center",
                action=argparse.BooleanOptionalAction,
                default=None,
                help=COMMON_OPTIONS["center"].help + " (--no-center: off where a method's "
                f"default is on) [default {'on' if on else 'off'}"
                + (f", {method}'s own]" if "center" in real else "]"),
            )
        for key in mine:
            g.add_argument(
                f"--{dash(key)}",
                dest=_PREFIX + key,
                metavar=key.upper(),
                help=_help(own[key]),
            )
    if card is not None and card.own_defaults:
        shown = ", ".join(f"--{dash(k)} {v}" for k, v in card.own_defaults.items())
        p.epilog = f"{method}'s own defaults of common options: {shown} (see its help)"
    if not own:
        p.epilog = "method options: securevfl run METHOD --help"
    others = {k for c in every.values() for k in c.options} - set(own)
    for key in sorted(others):  # parsed so that the error can name the method, never shown
        p.add_argument(f"--{dash(key)}", dest=_PREFIX + key, help=argparse.SUPPRESS)
    return groups


def _add_common(g: Any, key: str, method: str | None, real: dict[str, Any]) -> None:
    """One common option in its group (``--reproducible-noise`` is a flag)."""
    if key == "reproducible_noise":
        g.add_argument(
            "--reproducible-noise",
            dest=key,
            action="store_true",
            default=None,
            help=_help(COMMON_OPTIONS[key].help),
        )
        return
    g.add_argument(
        f"--{dash(key)}",
        dest=key,
        metavar=key.upper(),
        help=_help(common_help(key, method, real)),
    )


_BY_TASK = "by the task: logistic (binary), least-squares (regression)"


def common_help(key: str, method: str | None, real: dict[str, Any]) -> str:
    """A common option's help: its choices (registered losses and penalties too) and the
    default ``method`` really uses."""
    opt = COMMON_OPTIONS[key]
    if key in ("loss", "penalty"):  # registries (plugins may add): listed when help is asked
        opt = replace(opt, choices=tuple(catalogue().names[key]))
    if key in real and key != "model":
        text = replace(opt, default=real[key]).describe()
        return text[:-1] + f" ({method}'s own)]"
    if key == "model" and method is not None:
        return replace(opt, default=real["model"]).describe()
    text = opt.describe()
    return text.replace("default none]", f"default {_BY_TASK}]") if key == "loss" else text


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
