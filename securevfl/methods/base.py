"""What a method (or baseline) is, and how it registers.

A method declares its options (so the CLI can offer ``--b 64`` for one method and refuse it for
another), validates a :class:`~securevfl.context.RunSpec`, and implements ``fit`` as SPMD protocol
code against the runtime in the :class:`~securevfl.context.RunContext`. The runner around it
(``securevfl.experiment``) does the shared work: loading and partitioning data, seeding, timing,
metering and the result record.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from securevfl.context import Option, RunContext, RunSpec
from securevfl.errors import ConfigError
from securevfl.registry import register
from securevfl.results import FitResult


class Method(ABC):
    """A training method or baseline. Subclasses register with :func:`register_method`."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    family: ClassVar[str] = "plain"  # "plain", "dp", "dp+mpc", "he"
    models: ClassVar[tuple[str, ...]] = ("glm",)
    private: ClassVar[bool] = False
    uses_server: ClassVar[bool] = False  # a server/coordinator at index K (= data parties)
    labels_at_server: ClassVar[bool] = False  # the server, not party 0, holds the labels
    pooled_data: ClassVar[bool] = False  # a non-federated baseline that sees all columns
    options: ClassVar[dict[str, Option]] = {}

    def n_parties(self, spec: RunSpec) -> int:
        """Runtime parties: the data parties plus the server where there is one."""
        return spec.parties + (1 if self.uses_server else 0)

    def validate(self, spec: RunSpec) -> None:
        """Raise ConfigError for a spec this method cannot run; called before any work."""
        if spec.model not in self.models:
            raise ConfigError(
                f"model for method {self.name!r} must be one of {list(self.models)}, "
                f"got {spec.model!r}"
            )
        unknown = set(spec.options) - set(self.options)
        if unknown:
            raise ConfigError(
                f"option --{sorted(unknown)[0].replace('_', '-')} does not apply to method "
                f"{self.name!r} (its options: {sorted(self.options) or 'none'})"
            )
        if self.epsilon_required(spec) and spec.epsilon is None:
            raise ConfigError(f"method {self.name!r} is private: epsilon must be given")

    def epsilon_required(self, spec: RunSpec) -> bool:
        """Whether the spec must give --epsilon (private methods calibrate their noise to it)."""
        return self.private

    @abstractmethod
    def fit(self, ctx: RunContext) -> FitResult:
        """Train (SPMD), then score the test split at the label holder."""


def register_method(cls: type[Method]) -> type[Method]:
    """Class decorator: make a method available by its name."""
    register("method", cls.name, cls)
    return cls
