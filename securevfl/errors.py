"""The project's exceptions.

Every message names the rule and the value received, e.g. ``epsilon must be > 0, got -1.0``;
the CLI prints that one line and exits with code 2.
"""

from __future__ import annotations

import math
from typing import Any


class SecureVFLError(Exception):
    """Base of all securevfl errors."""


class ConfigError(SecureVFLError, ValueError):
    """A parameter or an input violates a documented rule."""


class DataError(SecureVFLError, ValueError):
    """A dataset is missing, malformed or inconsistent."""


class UnknownNameError(SecureVFLError, KeyError):
    """A registry lookup for a name that is not registered."""

    def __str__(self) -> str:  # KeyError quotes its message; we want the plain sentence
        return str(self.args[0]) if self.args else ""


class ProtocolError(SecureVFLError, RuntimeError):
    """A protocol could not complete (a party dropped, a timeout, a malformed message).

    Raised instead of ever returning a wrong result.
    """


class PartyTimeoutError(ProtocolError, TimeoutError):
    """A party waited longer than the configured timeout for a peer."""


def check_positive(name: str, value: Any, *, strict: bool = True) -> float:
    """Return ``value`` as float if it is > 0 (>= 0 when not strict), else raise ConfigError."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {value!r}") from None
    if math.isnan(v) or (v <= 0 if strict else v < 0) or math.isinf(v):
        rule = "> 0" if strict else ">= 0"
        raise ConfigError(f"{name} must be {rule} and finite, got {value!r}")
    return v


def check_open_unit(name: str, value: Any) -> float:
    """Return ``value`` as float if it lies in the open interval (0, 1), else raise ConfigError."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number in (0, 1), got {value!r}") from None
    if not 0.0 < v < 1.0:
        raise ConfigError(f"{name} must be in (0, 1), got {value!r}")
    return v


def check_int(
    name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """Return ``value`` as int if it is an integer within [minimum, maximum], else raise."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int,))
        and not (isinstance(value, float) and value.is_integer())
    ):
        try:
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                value = int(value)
            else:
                raise ValueError
        except ValueError:
            raise ConfigError(f"{name} must be an integer, got {value!r}") from None
    v = int(value)
    if minimum is not None and v < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {v}")
    if maximum is not None and v > maximum:
        raise ConfigError(f"{name} must be <= {maximum}, got {v}")
    return v
