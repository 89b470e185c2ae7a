"""What a method (or baseline) is, and how it registers.

A method declares its options (so the CLI can offer ``--b 64`` for one method and refuse it for
another), validates a :class:`~securevfl.context.RunSpec`, and implements ``fit`` as SPMD protocol
code against the runtime in the :class:`~securevfl.context.RunContext`. The runner around it
(``securevfl.experiment``) does the shared work: loading and partitioning data, seeding, timing,
metering and the result record.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from securevfl.context import Option, RunContext, RunSpec
from securevfl.data import check_image_dataset
from securevfl.errors import ConfigError
from securevfl.options import dash
from securevfl.privacy.centring import CENTRE_SHARE
from securevfl.registry import register
from securevfl.results import FitResult
from securevfl.run_options import COMMON_OPTIONS, not_an_option

# what each family's guarantee rests on: reports select records by these, never by method name.
# "zo" (zeroth-order clients, VFL-CZOFO) has no formal guarantee: its intrinsic-privacy figure is
# a heuristic the record names as such, so it guarantees nothing here.
GUARANTEES = {"plain": (), "dp": ("dp",), "dp+mpc": ("dp", "mpc"), "he": ("he",), "zo": ()}


# the record's name of what a --model trains (``best``: local's pick among glm, mlp and gbdt)
ARCHITECTURES = {"mlp": "split-nn", "cnn": "split-nn", "gbdt": "boosted-trees", "best": "best-of"}


class Method(ABC):
    """A training method or baseline. Subclasses register with :func:`register_method`."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    family: ClassVar[str] = "plain"  # a key of GUARANTEES
    models: ClassVar[tuple[str, ...]] = ("glm",)
    requires_epsilon: ClassVar[bool] = False  # a run must give --epsilon (calibrates to it)
    accepts_epsilon: ClassVar[bool] = False  # --epsilon is optional (implied by requires_epsilon)
    uses_server: ClassVar[bool] = False  # a server/coordinator at index K (= data parties)
    labels_at_server: ClassVar[bool] = False  # the server, not party 0, holds the labels
    pooled_data: ClassVar[bool] = False  # a non-federated baseline that sees all columns
    pure_dp: ClassVar[bool] = False  # its ε holds at δ = 0 (a csv: run's DP ranges: Laplace)
    label_party_only: ClassVar[bool] = False  # a baseline on the label holder's columns alone
    options: ClassVar[dict[str, Option]] = {}
    # the unit of the method's ε (sizes the budget reserved for released centring means)
    privacy_unit: ClassVar[str] = "party-row"

    def composes_centring(self, spec: RunSpec) -> bool:
        """Whether the method composes the released column means into its own ledger (one
        accountant with its releases, tight) instead of the record adding them by basic
        composition; such a method is run at the whole ε and sizes its noise for both."""
        return False

    def centre_share(self, spec: RunSpec) -> float:
        """The share of ε that a run with ``--center`` and ``--epsilon`` spends on the released
        column means (``privacy.centring``)."""
        return CENTRE_SHARE

    def has_server(self, spec: RunSpec) -> bool:
        """Whether this run has a server at index K (``uses_server`` unless an option says)."""
        return self.uses_server

    def n_parties(self, spec: RunSpec) -> int:
        """Runtime parties: the data parties plus the server where there is one."""
        return spec.parties + (1 if self.has_server(spec) else 0)

    def validate(self, spec: RunSpec) -> None:
        """Raise ConfigError for a spec this method cannot run; called before any work.

        Every option is checked by its declaration (type, range, choices, ``when``); subclasses
        add only the rules that tie several values together.
        """
        if spec.model not in self.models:
            raise ConfigError(
                f"model for method {self.name!r} must be one of {list(self.models)}, "
                f"got {spec.model!r}"
            )
        if spec.model == "cnn":  # its bottoms place pixels in their image rows
            check_image_dataset(spec.dataset, model=spec.model)
        for key in spec.options:
            if key not in self.options:
                raise ConfigError(not_an_option(key, self))
        for key, opt in self.options.items():
            opt.check(key, spec.option(key, self), owner=self.name)
            if opt.when is not None and key in spec.options:
                other, allowed = opt.when
                if spec.option(other, self) not in allowed:
                    raise ConfigError(
                        f"option --{dash(key)} of method {self.name!r} applies with "
                        f"--{dash(other)} {'/'.join(map(str, allowed))}, got --{dash(other)} "
                        f"{spec.option(other, self)}"
                    )
        if spec.epsilon is not None and not (self.accepts_epsilon or self.requires_epsilon):
            raise ConfigError(
                f"epsilon does not apply to method {self.name!r} (it has no privacy budget to "
                f"set), got --epsilon {spec.epsilon:g}"
            )
        if self.epsilon_required(spec) and spec.epsilon is None:
            raise ConfigError(
                f"epsilon must be given for method {self.name!r} (it calibrates its noise to "
                "it), got none"
            )

    @classmethod
    def common_defaults(cls, given: dict[str, Any]) -> dict[str, Any]:
        """This method's own defaults for common options (RunSpec fields, dataset options) the
        run did not set; ``given`` holds the values it did set (public: dataset name, K, ε).

        ``build_spec`` applies them, so ``securevfl run M --dataset D --epsilon E`` gets M's
        best measured setting; a value the user gives always wins. Documented in M's help.
        """
        return {}

    def epsilon_required(self, spec: RunSpec) -> bool:
        """Whether this spec must give --epsilon (methods that calibrate their noise to it)."""
        return self.requires_epsilon

    @classmethod
    def capabilities(cls, model: str | None = None) -> dict[str, Any]:
        """What the record says about the method: family, guarantees, models, architecture."""
        model = model or cls.models[0]
        return {
            "family": cls.family,
            "guarantees": list(GUARANTEES.get(cls.family, ())),
            "models": list(cls.models),
            "architecture": ARCHITECTURES.get(model, "glm"),
            "data": "pooled"
            if cls.pooled_data
            else ("label-party" if cls.label_party_only else "federated"),
            "federated": not (cls.pooled_data or cls.label_party_only),
            "server": cls.uses_server,
            "requires_epsilon": cls.requires_epsilon,
            "accepts_epsilon": cls.accepts_epsilon or cls.requires_epsilon,
        }

    @abstractmethod
    def fit(self, ctx: RunContext) -> FitResult:
        """Train (SPMD), then score the test split at the label holder."""


def check_declaration(cls: type[Method]) -> None:
    """A method's declaration is consistent: known family, own option names, valid defaults."""
    if cls.family not in GUARANTEES:
        raise ConfigError(
            f"family of method {cls.name!r} must be one of {list(GUARANTEES)}, got {cls.family!r}"
        )
    for key, opt in cls.options.items():
        if key in COMMON_OPTIONS or key in ("method", "options", "dataset_options"):
            raise ConfigError(
                f"option names of method {cls.name!r} must not shadow a common option, got {key!r}"
            )
        opt.check(key, opt.default, owner=cls.name)
        if opt.when is not None and opt.when[0] not in cls.options:
            raise ConfigError(
                f"option {key!r} of method {cls.name!r} applies 'when' an option it does not "
                f"have, got {opt.when[0]!r}"
            )


def register_method(cls: type[Method]) -> type[Method]:
    """Class decorator: check the method's declaration, then make it available by its name."""
    check_declaration(cls)
    register("method", cls.name, cls)
    return cls
