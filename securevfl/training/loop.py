"""What both trainers share around their step: the named stage of a batch, the per-epoch
statistics, the privacy events handed to the ledger, and what a whole run returns.

A batch is named by :class:`Batch` (its phase, epoch, index and rows), never by the sign of a
step counter. The trainers fill :class:`~securevfl.results.RunStats` (``epoch_s``,
``epoch_cpu_s``, ``epoch_loss``, ``epoch_accuracy``) the same way for every method, and compose
the events their hooks declare into the run's :class:`~securevfl.privacy.accountant.PrivacyLedger`
(hooks say what a stage released; they do not count releases beside the loop).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from securevfl.context import RunContext
from securevfl.results import FitResult, RunStats
from securevfl.training.batching import minibatches, n_batches

if TYPE_CHECKING:  # a ledger exists only in a DP run: the accountant is imported by its maker
    from dp_accounting import dp_event

    from securevfl.privacy.accountant import PrivacyLedger

TRAIN, EVAL = "train", "eval"
# a release: (party whose rows it depends on, its event); composed into the run's ledger
Release = tuple[int, "dp_event.DpEvent"]


@dataclass(frozen=True)
class Batch:
    """One batch of a stage, public to every party (the schedule derives from the shared seed).

    ``phase`` is ``"train"`` or ``"eval"``; ``epoch`` is None in evaluation; ``index`` counts
    batches within the epoch (train) or the scored split (eval); ``step`` is the global training
    step (in evaluation: the number of training steps taken); ``start`` / ``size`` locate the
    batch in the epoch's order (train) or the split (eval); ``n_rows`` is that epoch's or split's
    row count.
    """

    phase: str
    epoch: int | None
    index: int
    step: int
    start: int
    size: int
    n_rows: int


def train_batches(ctx: RunContext, epoch: int, first_step: int) -> Iterator[tuple[Batch, Any]]:
    """(Batch, row indices) of one training epoch, in the shared minibatch order."""
    n = ctx.info.n_train
    start = 0
    for i, idx in enumerate(minibatches(n, ctx.spec.batch_size, seed=ctx.shared_seed, epoch=epoch)):
        yield Batch(TRAIN, epoch, i, first_step + i, start, len(idx), n), idx
        start += len(idx)


def eval_batches(n_rows: int, batch_size: int, step: int) -> Iterator[Batch]:
    """Consecutive chunks of a split to score, ``batch_size`` rows each (the last may be short)."""
    bs = max(1, min(batch_size, n_rows))
    for i, start in enumerate(range(0, n_rows, bs)):
        yield Batch(EVAL, None, i, step, start, min(bs, n_rows - start), n_rows)


def compose_releases(ledger: PrivacyLedger | None, releases: Iterable[Release]) -> None:
    """Hand a stage's releases to the ledger (a run without a ledger declares none)."""
    for party, event in releases:
        if ledger is None:
            raise ValueError("hooks declared a privacy release but the trainer has no ledger")
        ledger.compose(party, event)


class EpochClock:
    """Fills the per-epoch fields of :class:`RunStats` from the loop's own measurements.

    Wall and CPU seconds of each epoch (CPU too: wall time on a shared machine grows with
    others' load); the mean training loss of the epoch's batches and the fraction of training
    rows the forward pass classified correctly (classification only; at the label holder).
    """

    def __init__(self, stats: RunStats, *, classify: bool) -> None:
        self.stats, self.classify = stats, classify
        self.losses: list[float] = []
        self.correct = 0
        self.rows = 0

    def start(self) -> None:
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        self.losses, self.correct, self.rows = [], 0, 0

    def batch(self, loss: float, predicted: np.ndarray | None, y: np.ndarray) -> None:
        """Record one batch seen by the label holder (``predicted``: class ids, or None)."""
        self.losses.append(loss)
        self.rows += len(y)
        if self.classify and predicted is not None:
            self.correct += int(np.sum(predicted == y))

    def stop(self) -> None:
        self.stats.epoch_s.append(time.perf_counter() - self.t0)
        self.stats.epoch_cpu_s.append(time.process_time() - self.c0)
        if self.losses:
            self.stats.epoch_loss.append(float(np.mean(self.losses)))
            if self.classify and self.rows:
                self.stats.epoch_accuracy.append(self.correct / self.rows)


@dataclass
class TrainRun:
    """A whole run of a trainer on this process: state, training time, scores, statistics."""

    state: Any
    train_s: float
    scores: np.ndarray | None  # at the label holder, None elsewhere
    fingerprints: dict[Any, str]
    stats: RunStats = field(default_factory=RunStats)
    # how the test split was scored: split-NN "private" (through the hooks) or "plain"; GLM
    # "hooks" (its passive parties always score with ``score_weights``)
    eval_mode: str = "plain"
    model: dict[int, Any] | None = None  # party -> ModelPart (training.export); None: none
    model_refusal: str | None = None  # why there is no model, one line
    extra: dict[str, Any] = field(default_factory=dict)  # trainer facts for the record

    def result(self, privacy: Any = None, extra: dict[str, Any] | None = None) -> FitResult:
        """The method's :class:`FitResult` from this run."""
        refusal = self.model_refusal
        if self.model is None and refusal is None and self.eval_mode == "private":
            refusal = (  # every scored row goes through the method's own noisy path
                "it scores each row through its private path (noisy embeddings), which predict "
                "cannot replay yet"
            )
        return FitResult(
            self.scores,
            self.train_s,
            privacy=privacy,
            fingerprints=self.fingerprints,
            stats=self.stats,
            extra={**self.extra, **(extra or {})},
            model=self.model,
            model_refusal=refusal,
        )


def steps_per_epoch(ctx: RunContext) -> int:
    """Training steps of one epoch (the public batching schedule)."""
    return n_batches(ctx.info.n_train, ctx.spec.batch_size)


def row_uses(ctx: RunContext, *, private_eval: bool) -> int:
    """How many releases of a party's rows a run makes: every training row each epoch, and
    every test row once more when scoring goes through the private path."""
    return ctx.spec.epochs * ctx.info.n_train + (ctx.info.n_test if private_eval else 0)
