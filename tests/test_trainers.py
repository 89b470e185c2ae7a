"""The trainers own the whole loop: named batch stages, the eval plug point, per-epoch statistics,
the ledger's events, and generic k-fold tuning."""

import dataclasses

import numpy as np
import pytest

from securevfl.context import RunContext, RunSpec
from securevfl.errors import ConfigError
from securevfl.experiment import build_views, run_experiment, validate_spec
from securevfl.models.logistic_threshold import theta_from_logistic_derivative
from securevfl.privacy.accountant import PrivacyLedger
from securevfl.privacy.events import gaussian_event
from securevfl.runtime import InProcessRuntime
from securevfl.training import (
    EVAL,
    TRAIN,
    GLMHooks,
    SplitNNHooks,
    fit_glm,
    fit_splitnn,
    kfold_tune,
    minibatches,
    n_batches,
    row_uses,
)
from securevfl.training.loop import eval_batches, train_batches


def _ctx(model: str = "glm", **kw) -> RunContext:
    spec = RunSpec(
        **{
            "method": "vfl",
            "dataset": "breast",
            "parties": 2,
            "model": model,
            "epochs": 2,
            "batch_size": 64,
            "seed": 5,
            **kw,
        }
    )
    method = validate_spec(spec)
    info, views, _ = build_views(spec, method, [0, 1])
    return RunContext(InProcessRuntime(2), spec, info, views, shared_seed=5)


def test_batches_are_named_by_phase_epoch_and_rows():
    ctx = _ctx()
    n, nb = ctx.info.n_train, n_batches(ctx.info.n_train, 64)
    got = list(train_batches(ctx, 1, first_step=nb))
    idx = list(minibatches(n, 64, seed=5, epoch=1))
    assert [b.step for b, _ in got] == list(range(nb, 2 * nb))
    assert all(b.phase == TRAIN and b.epoch == 1 and b.n_rows == n for b, _ in got)
    assert [b.start for b, _ in got] == [64 * i for i in range(nb)]
    assert all(np.array_equal(i, j) for (_, i), j in zip(got, idx))
    ev = list(eval_batches(113, 64, step=7))
    assert [(b.phase, b.index, b.start, b.size, b.step) for b in ev] == [
        (EVAL, 0, 0, 64, 7),
        (EVAL, 1, 64, 49, 7),
    ]
    assert row_uses(ctx, private_eval=True) == 2 * n + ctx.info.n_test
    assert row_uses(ctx, private_eval=False) == 2 * n


@pytest.mark.parametrize("model", ["glm", "mlp"])
def test_every_trainer_fills_the_per_epoch_statistics(model):
    rec = run_experiment(
        RunSpec(method="vfl", dataset="breast", parties=2, model=model, epochs=3, seed=2)
    )
    st = rec["stats"]
    for name in ("epoch_s", "epoch_cpu_s", "epoch_loss", "epoch_accuracy"):
        assert len(st[name]) == 3, name
    assert all(0.0 <= a <= 1.0 for a in st["epoch_accuracy"])
    assert all(t >= 0 for t in st["epoch_s"] + st["epoch_cpu_s"])
    assert st["epoch_loss"][-1] < st["epoch_loss"][0]  # breast is easy: the loss falls


class _Derivatives(GLMHooks):
    def __init__(self):
        self.derivs = []

    def active_message(self, ctx, deriv, step):
        self.derivs.append(np.array(deriv))
        return deriv


def test_epoch_loss_and_accuracy_are_the_epochs_batches():
    ctx = _ctx(epochs=2)
    hooks = _Derivatives()
    run = fit_glm(ctx, hooks)
    nb = n_batches(ctx.info.n_train, 64)
    losses = run.state.losses
    assert run.stats.epoch_loss == pytest.approx(
        [np.mean(losses[:nb]), np.mean(losses[nb : 2 * nb])], rel=1e-12
    )
    # the accuracy of each batch's theta, recovered from the logistic derivative sent back
    correct = [0, 0]
    for step, d in enumerate(hooks.derivs):
        theta, y01 = theta_from_logistic_derivative(d)
        correct[step // nb] += int(np.sum((theta > 0) == (y01 == 1)))
    n = ctx.info.n_train
    assert run.stats.epoch_accuracy == pytest.approx([correct[0] / n, correct[1] / n])


class _Declaring(GLMHooks):
    """One Gaussian release of party 1 per epoch and one for the scoring."""

    def __init__(self):
        self.evaluated = False

    def epoch_releases(self, ctx, epoch):
        return [(1, gaussian_event(sigma=2.0, sensitivity=1.0))]

    def configure_evaluate(self, ctx, state):
        self.evaluated = True
        state.bias = 100.0  # every test row scores as positive

    def eval_releases(self, ctx, n_rows):
        return [(1, gaussian_event(sigma=2.0, sensitivity=1.0, count=n_rows))]


def test_the_glm_trainer_composes_what_the_hooks_declare_and_runs_the_eval_plug_point():
    ctx = _ctx(epochs=3)
    ledger = PrivacyLedger("party-row")
    hooks = _Declaring()
    run = fit_glm(ctx, hooks, ledger=ledger)
    assert hooks.evaluated and np.all(run.scores > 0.99)
    assert ledger.parties[1].releases == 3 + ctx.info.n_test
    assert 0 not in ledger.parties
    with pytest.raises(ValueError, match="no ledger"):
        fit_glm(_ctx(), _Declaring())


class _Recording(SplitNNHooks):
    """Records the stage of every message; scores privately or plainly as asked."""

    def __init__(self, mode):
        self.mode, self.seen = mode, []

    def party_message(self, ctx, k, emb, step):
        self.seen.append((self.batch.phase, self.batch.index, len(emb), step))
        return emb + 1.0  # what the label holder sees differs from the plain embedding

    def configure_evaluate(self, ctx, state):
        return self.mode

    def eval_releases(self, ctx, n_rows):
        return [(k, gaussian_event(sigma=1.0, sensitivity=1.0, count=n_rows)) for k in (0, 1)]


def test_private_scoring_runs_through_the_hooks_in_named_eval_batches():
    ctx = _ctx("mlp", epochs=1)
    nb, n_test = n_batches(ctx.info.n_train, 64), ctx.info.n_test
    ledger = PrivacyLedger("party-row")
    seen = _Recording("private")
    private = fit_splitnn(ctx, seen, ledger=ledger)
    hooks = _Recording("plain")
    plain = fit_splitnn(_ctx("mlp", epochs=1), hooks, ledger=PrivacyLedger("party-row"))
    assert private.fingerprints == plain.fingerprints  # the same training
    assert not np.allclose(private.scores, plain.scores)  # scored through the +1 messages
    assert private.scores.shape == (n_test, 2) and private.eval_mode == "private"
    evals = [s for s in seen.seen if s[0] == EVAL]
    assert [e[1] for e in evals[::2]] == list(range(-(-n_test // 64)))
    assert sum(e[2] for e in evals) == 2 * n_test  # two data parties
    assert {e[3] for e in evals} == {nb}  # step: the training steps taken
    assert all(s[0] == TRAIN for s in hooks.seen)  # plain scoring sends no hook message
    assert ledger.parties[1].releases == n_test
    with pytest.raises(ValueError, match="configure_evaluate"):
        fit_splitnn(_ctx("mlp", epochs=1), _Recording("both"), ledger=PrivacyLedger("party-row"))


def test_kfold_tuning_is_generic_and_its_folds_partition_the_training_split():
    ctx = _ctx(epochs=1)
    n = ctx.info.n_train
    seen: dict[int, list[np.ndarray]] = {}

    def fold(sub, setting, f):
        seen.setdefault(f, []).append(sub.views[1].X_test[:, 0].copy())
        assert sub.info.n_train + sub.info.n_test == n
        spec = dataclasses.replace(sub.spec, lr=setting["lr"])
        return fit_glm(dataclasses.replace(sub, spec=spec)).scores

    grid = [{"lr": 1e-6}, {"lr": 4.0}]
    chosen, table = kfold_tune(ctx, grid, fold, folds=3, purpose="test/cv")
    assert chosen == {"lr": 4.0} and isinstance(chosen["lr"], float)
    assert [row["lr"] for row in table] == [1e-6, 4.0]
    assert table[1]["cv_score"] > table[0]["cv_score"]
    # every training row is validated exactly once per setting
    vals = np.sort(np.concatenate([seen[f][0] for f in range(3)]))
    np.testing.assert_array_equal(vals, np.sort(ctx.views[1].X_train[:, 0]))
    assert ctx.rt.meter.summary(2)["by_phase"]["tuning"]["bytes"] > 0
    with pytest.raises(ConfigError, match="tuning needs at least"):
        kfold_tune(ctx, grid, fold, folds=4 * n)
    with pytest.raises(ConfigError, match="folds must be >= 2"):
        kfold_tune(ctx, grid, fold, folds=1)
