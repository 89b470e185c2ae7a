"""Generalised linear model losses and penalties for the shared GLM trainer.

A loss is written in terms of the linear predictor theta = x.w (summed over all parties' blocks):
the active party, which holds the labels, evaluates ``derivative(theta, y)`` and returns it; each
party then forms its own block's gradient ``X_k^T derivative / b``. The constants ``L``
(Lipschitz constant of the loss derivative in theta), ``beta_theta``, ``beta_y`` and ``k_y`` are
the ones the HDP-VFL sensitivity analysis needs (its Appendix D); a loss that does not know them
leaves them ``None`` and cannot be used by a method that needs them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from securevfl.errors import ConfigError, check_positive
from securevfl.registry import lookup, names, register


def _expit(x):
    """scipy's logistic function, imported where it is used: only the label holder evaluates a
    loss, so a data party's process does not load scipy.special (~0.6 CPU-s a start)."""
    from scipy.special import expit

    return expit(x)


class GLMLoss(ABC):
    """Per-sample loss l(theta, y) of a GLM."""

    name: ClassVar[str]
    task: ClassVar[str]  # "binary" or "regression"
    L: ClassVar[float | None] = None
    beta_theta: ClassVar[float | None] = None
    beta_y: ClassVar[float | None] = None
    k_y: ClassVar[float | None] = None

    def encode_labels(self, y: np.ndarray) -> np.ndarray:
        """Map dataset labels to the loss's label domain; raise on a wrong domain."""
        return np.asarray(y, dtype=float)

    @abstractmethod
    def value(self, theta: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Per-sample loss."""

    @abstractmethod
    def derivative(self, theta: np.ndarray, y: np.ndarray) -> np.ndarray:
        """d loss / d theta per sample."""

    @abstractmethod
    def predict(self, theta: np.ndarray) -> np.ndarray:
        """Score used for evaluation: P(y=1) for binary tasks, the mean response otherwise."""


def plus_minus_one_labels(y: np.ndarray, loss_name: str) -> np.ndarray:
    """Binary labels as ±1 floats: {0, 1} is mapped (1 -> +1), {-1, +1} kept; else ConfigError."""
    y = np.asarray(y)
    values = set(np.unique(y).tolist())
    if values <= {0, 1}:
        return np.where(y == 1, 1.0, -1.0)
    if values <= {-1, 1}:
        return y.astype(float)
    raise ConfigError(
        f"labels for loss {loss_name!r} must be in {{0,1}} or {{-1,+1}}, got {sorted(values)[:5]}"
    )


class LogisticLoss(GLMLoss):
    """log(1 + exp(-y theta)) with y in {-1, +1} (dataset labels {0, 1} are mapped)."""

    name = "logistic"
    task = "binary"
    # |d/dtheta| <= 1 and the derivative is 1/4-Lipschitz in theta, 1/2-Lipschitz in y (y = ±1)
    L = 1.0
    beta_theta = 0.25
    beta_y = 0.5
    k_y = 1.0

    def encode_labels(self, y: np.ndarray) -> np.ndarray:
        return plus_minus_one_labels(y, self.name)

    def value(self, theta, y):
        return np.logaddexp(0.0, -y * theta)

    def derivative(self, theta, y):
        return -y * _expit(-y * theta)

    def predict(self, theta):
        return _expit(theta)


class LeastSquaresLoss(GLMLoss):
    """(theta - y)^2 / 2 for regression targets in [-1, 1]."""

    name = "least-squares"
    task = "regression"
    # with |theta| <= 1 (||x|| <= 1, ||w|| <= 1) and |y| <= 1: |theta - y| <= 2
    L = 2.0
    beta_theta = 1.0
    beta_y = 1.0
    k_y = 1.0

    def value(self, theta, y):
        return 0.5 * (theta - y) ** 2

    def derivative(self, theta, y):
        return theta - y

    def predict(self, theta):
        return theta


class Penalty(ABC):
    """A penalty r(w) of a block of weights; smooth parts via ``grad``, the rest via ``prox``."""

    name: ClassVar[str]

    def __init__(self, lam: float = 0.0) -> None:
        self.lam = check_positive("lam", lam, strict=False)

    def grad(self, w: np.ndarray) -> np.ndarray:
        """Gradient of the smooth part."""
        return np.zeros_like(w)

    def prox(self, w: np.ndarray, step: float) -> np.ndarray:
        """Proximal step of the non-smooth part (identity when there is none)."""
        return w

    def value(self, w: np.ndarray) -> float:
        return 0.0


class L2Penalty(Penalty):
    """(lam / 2) ||w||^2."""

    name = "l2"

    def grad(self, w):
        return self.lam * w

    def value(self, w):
        return 0.5 * self.lam * float(w @ w)


class NoPenalty(Penalty):
    name = "none"


def register_loss(cls: type[GLMLoss]) -> type[GLMLoss]:
    """Make a loss available by name (``--loss``)."""
    register("loss", cls.name, cls)
    return cls


def register_penalty(cls: type[Penalty]) -> type[Penalty]:
    """Make a penalty available by name (``--penalty``)."""
    register("penalty", cls.name, cls)
    return cls


for _cls in (LogisticLoss, LeastSquaresLoss):
    register_loss(_cls)
for _pen in (L2Penalty, NoPenalty):
    register_penalty(_pen)


def make_loss(name: str) -> GLMLoss:
    """Instantiate a registered loss."""
    return lookup("loss", name)()


def make_penalty(name: str, lam: float) -> Penalty:
    """Instantiate a registered penalty with strength ``lam``."""
    return lookup("penalty", name)(lam)


def default_loss_for(task: str) -> str:
    """The GLM loss used when none is given."""
    if task == "binary":
        return "logistic"
    if task == "regression":
        return "least-squares"
    raise ConfigError(f"GLM needs a binary or regression task, got {task!r} (use --model mlp)")


def loss_names() -> list[str]:
    return names("loss")
