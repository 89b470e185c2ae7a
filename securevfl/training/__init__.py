"""The shared training core: GLM trainer and split-NN trainer with their plug points, the
shared loop pieces (batch stages, per-epoch statistics, releases) and generic k-fold tuning."""

from securevfl.training.batching import balanced_batch_size, minibatches, n_batches
from securevfl.training.glm_trainer import (
    GLMHooks,
    GLMState,
    fit_glm,
    glm_fingerprints,
    predict_glm,
    train_glm,
)
from securevfl.training.loop import EVAL, TRAIN, Batch, Release, TrainRun, row_uses
from securevfl.training.splitnn_trainer import (
    SplitNNHooks,
    SplitNNState,
    fit_splitnn,
    predict_private,
    predict_splitnn,
    splitnn_fingerprints,
    train_splitnn,
)
from securevfl.training.tuning import fold_context, kfold_tune

__all__ = [
    "EVAL",
    "TRAIN",
    "Batch",
    "GLMHooks",
    "GLMState",
    "Release",
    "SplitNNHooks",
    "SplitNNState",
    "TrainRun",
    "balanced_batch_size",
    "fit_glm",
    "fit_splitnn",
    "fold_context",
    "glm_fingerprints",
    "kfold_tune",
    "minibatches",
    "n_batches",
    "predict_glm",
    "predict_private",
    "predict_splitnn",
    "row_uses",
    "splitnn_fingerprints",
    "train_glm",
    "train_splitnn",
]
