"""Declarative options: what a value must be, checked in one place for the CLI, suites and API.

An :class:`Option` names its parser, default and help, and the rule a value must meet: a set of
choices, a numeric range with open or closed ends (numbers must also be finite), and which runs it
applies to (``when``). :meth:`Option.check` returns the parsed value or raises a ConfigError that
names the option, the rule and the value received.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from securevfl.errors import ConfigError


def parse_bool(value: Any) -> bool:
    """A boolean option: true/false, yes/no, on/off, 1/0 (CLI strings) or a bool (suites)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"a boolean option must be true or false, got {value!r}")


def _as_int(value: Any) -> int:
    # bool is an int subclass and a float may silently truncate: neither is an integer option
    if isinstance(value, bool) or isinstance(value, float):
        raise ValueError(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return int(value.strip())
    raise ValueError(value)


def _as_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, (int, float, str)):
        return float(value)  # OverflowError for ints beyond float's range
    raise ValueError(value)


def _as_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(value)
    return value


_PARSERS: dict[Any, Callable[[Any], Any]] = {int: _as_int, float: _as_float, str: _as_str}
_KINDS = {int: "integer", float: "number", str: "string", parse_bool: "true/false"}


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


@dataclass(frozen=True)
class Option:
    """One option (``--<name>``, underscores as dashes) and the rule its values must meet.

    ``gt``/``ge``/``lt``/``le`` bound numbers (open or closed ends); a number must be finite.
    ``when=("scheme", ("paillier",))``: the option applies only to runs whose option ``scheme``
    is one of those values; giving it to another run is an error, not silently ignored.
    """

    type: Callable[[Any], Any]
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    when: tuple[str, tuple[Any, ...]] | None = None

    @property
    def kind(self) -> str:
        """What a value is, in words: integer, number, string, true/false or the parser's name."""
        if self.choices is not None:
            return "choice"
        # a custom parser names its values itself (``parser.kind``), never its function name
        return getattr(self.type, "kind", None) or _KINDS.get(self.type, "value")

    def rule(self) -> str:
        """The value rule in words: 'one of a, b', 'in (0, 0.25]', '>= 1', or '' (none)."""
        if self.choices is not None:
            return "one of " + ", ".join(str(c) for c in self.choices)
        low = (self.gt, "(") if self.gt is not None else (self.ge, "[")
        high = (self.lt, ")") if self.lt is not None else (self.le, "]")
        if low[0] is not None and high[0] is not None:
            return f"in {low[1]}{_num(low[0])}, {_num(high[0])}{high[1]}"
        if low[0] is not None:
            return f"{'>' if low[1] == '(' else '>='} {_num(low[0])}"
        if high[0] is not None:
            return f"{'<' if high[1] == ')' else '<='} {_num(high[0])}"
        return ""

    def describe(self) -> str:
        """``help`` plus kind, rule and default, for ``--help``."""
        rule = self.rule()
        facts = self.kind + (f" {rule}" if rule and self.choices is None else "")
        if self.choices is not None:
            facts = rule
        if self.when is not None:
            facts += f"; only with --{dash(self.when[0])} {'/'.join(map(str, self.when[1]))}"
        default = "none" if self.default in (None, "") else self.default
        return f"{self.help} [{facts}; default {default}]"

    def check(self, name: str, value: Any, *, owner: str = "") -> Any:
        """Parse ``value`` and check it against the rule; return the parsed value."""
        whose = f" (method {owner!r})" if owner else ""
        parse = _PARSERS.get(self.type, self.type)
        try:
            v = parse(value)
        except ConfigError as exc:  # the parser named its own rule
            raise ConfigError(f"{name}{whose}: {exc}") from None
        except (TypeError, ValueError, OverflowError):
            what = {float: "a number", str: "a string"}.get(self.type, f"an {self.kind}")
            rule = f" {self.rule()}" if self.rule() and self.choices is None else ""
            raise ConfigError(f"{name} must be {what}{rule}{whose}, got {value!r}") from None
        if self.choices is not None and v not in self.choices:
            raise ConfigError(f"{name} must be {self.rule()}{whose}, got {value!r}")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            self._check_range(name, whose, v)
        return v

    def _check_range(self, name: str, whose: str, v: float) -> None:
        """Name the side that failed: '>= 1' when too small, '<= 4096' when too large."""
        if isinstance(v, float) and not math.isfinite(v):
            rule = self.rule()
            raise ConfigError(
                f"{name} must be finite{', ' + rule if rule else ''}{whose}, got {v!r}"
            )
        if (self.gt is not None and not v > self.gt) or (self.ge is not None and not v >= self.ge):
            low = f"> {_num(self.gt)}" if self.gt is not None else f">= {_num(self.ge)}"
            raise ConfigError(f"{name} must be {low}{whose}, got {v!r}")
        if (self.lt is not None and not v < self.lt) or (self.le is not None and not v <= self.le):
            high = f"< {_num(self.lt)}" if self.lt is not None else f"<= {_num(self.le)}"
            raise ConfigError(f"{name} must be {high}{whose}, got {v!r}")


def dash(name: str) -> str:
    """The CLI spelling of an option name."""
    return name.replace("_", "-")
