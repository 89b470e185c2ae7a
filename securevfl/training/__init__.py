"""The shared training core: GLM trainer and split-NN trainer with their plug points."""

from securevfl.training.batching import minibatches, n_batches
from securevfl.training.glm_trainer import (
    GLMHooks,
    GLMState,
    glm_fingerprints,
    predict_glm,
    train_glm,
)
from securevfl.training.splitnn_trainer import (
    SplitNNHooks,
    SplitNNState,
    predict_splitnn,
    splitnn_fingerprints,
    train_splitnn,
)

__all__ = [
    "GLMHooks",
    "GLMState",
    "SplitNNHooks",
    "SplitNNState",
    "glm_fingerprints",
    "minibatches",
    "n_batches",
    "predict_glm",
    "predict_splitnn",
    "splitnn_fingerprints",
    "train_glm",
    "train_splitnn",
]
