"""The shared training core: GLM trainer and split-NN trainer with their plug points, the
shared loop pieces (batch stages, per-epoch statistics, releases) and generic k-fold tuning.
Names are imported on first use (``securevfl.lazy``): a GLM run does not load torch (~1.8 s)
for the split-NN trainer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from securevfl.lazy import lazy_exports

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
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

_EXPORTS = {
    "balanced_batch_size": "securevfl.training.batching",
    "minibatches": "securevfl.training.batching",
    "n_batches": "securevfl.training.batching",
    "GLMHooks": "securevfl.training.glm_trainer",
    "GLMState": "securevfl.training.glm_trainer",
    "fit_glm": "securevfl.training.glm_trainer",
    "glm_fingerprints": "securevfl.training.glm_trainer",
    "predict_glm": "securevfl.training.glm_trainer",
    "train_glm": "securevfl.training.glm_trainer",
    "EVAL": "securevfl.training.loop",
    "TRAIN": "securevfl.training.loop",
    "Batch": "securevfl.training.loop",
    "Release": "securevfl.training.loop",
    "TrainRun": "securevfl.training.loop",
    "row_uses": "securevfl.training.loop",
    "SplitNNHooks": "securevfl.training.splitnn_trainer",
    "SplitNNState": "securevfl.training.splitnn_trainer",
    "fit_splitnn": "securevfl.training.splitnn_trainer",
    "predict_private": "securevfl.training.splitnn_trainer",
    "predict_splitnn": "securevfl.training.splitnn_trainer",
    "splitnn_fingerprints": "securevfl.training.splitnn_trainer",
    "train_splitnn": "securevfl.training.splitnn_trainer",
    "fold_context": "securevfl.training.tuning",
    "kfold_tune": "securevfl.training.tuning",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

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
