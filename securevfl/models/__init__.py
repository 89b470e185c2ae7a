"""GLM losses and penalties; torch bottom/top models."""

from securevfl.models.glm import (
    GLMLoss,
    L2Penalty,
    LeastSquaresLoss,
    LogisticLoss,
    NoPenalty,
    Penalty,
    default_loss_for,
    loss_names,
    make_loss,
    make_penalty,
    register_loss,
    register_penalty,
)

__all__ = [
    "GLMLoss",
    "L2Penalty",
    "LeastSquaresLoss",
    "LogisticLoss",
    "NoPenalty",
    "Penalty",
    "default_loss_for",
    "loss_names",
    "make_loss",
    "make_penalty",
    "register_loss",
    "register_penalty",
]
