"""The schedule options shared by the per-row-release DP methods (afe-vfl, ldp-vfl, pbm-vfl,
vafl-dp) and their plan: ``release-once`` (``training.release_once``) or the seed's ``split``.

``--release-schedule auto`` (the default) runs ``release-once`` when the run is DP
(``--epsilon``, DP bottoms) on a classification task, ``split`` otherwise.
``--active-features``: the label holder is also data party 0 (its own columns go into its
head as they are; nothing of them leaves it).
"""

from __future__ import annotations

import math
from typing import Any

from securevfl.context import Option, RunContext, RunSpec, parse_bool
from securevfl.errors import ConfigError
from securevfl.methods.base import Method
from securevfl.privacy.dp_bottom import grad_event, grad_noise_multiplier
from securevfl.privacy.events import PureDpEvent
from securevfl.training.own_model import OWN_MODELS
from securevfl.training.private_bottom import BottomDP
from securevfl.training.release_once import ReleaseOncePlan

SCHEDULES = ("auto", "release-once", "split")
RELEASE_ONCE = ("release_schedule", ("auto", "release-once"))

# Defaults of common options under release-once, chosen on breast and adult (never on the
# datasets the issue reports, phishing): one scalar per row for two classes (all of the norm on
# the label direction), larger DP-SGD batches (the noise on a batch mean falls as 1/b).
RELEASE_ONCE_DEFAULTS = {"batch_size": 256, "epochs": 20}
BINARY_EMBEDDING_DIM = 1


# the bottoms' DP-SGD: Adam moves ~lr per step, so a small table needs more epochs for the same
# progress (breast: 2 steps an epoch at b = 256); chosen on breast and adult
BOTTOM_STEPS, MIN_BOTTOM_EPOCHS, MAX_BOTTOM_EPOCHS = 200, 5, 50


def parse_auto_int(value: Any) -> Any:
    """'auto' or an integer in [1, 1000]."""
    if value is None or str(value).strip().lower() == "auto":
        return "auto"
    try:
        v = int(value)
    except OverflowError:
        raise ValueError(value) from None
    if not 1 <= v <= 1000:
        raise ConfigError(f"must be 'auto' or an integer in [1, 1000], got {value!r}")
    return v


def parse_epsilon_or_same(value: Any) -> Any:
    """'same' (the run's --epsilon) or a number in (0, 100] (beyond, randomized response
    keeps every label: the accountants' arithmetic overflows for nothing)."""
    if value is None or str(value).strip().lower() == "same":
        return "same"
    v = float(value)
    if not (0 < v <= 100):
        raise ConfigError(f"must be 'same' or a number in (0, 100], got {value!r}")
    return v


ACTIVE_FEATURES = Option(
    parse_bool,
    False,
    "the label holder is also a data party (party 0, its own columns, nothing of them leaves "
    "it; none of its budget is spent on them); parties 1..K-1 are the passive parties (K >= 2) "
    "and only their releases are accounted",
)

RELEASE_OPTIONS = {
    "release_schedule": Option(
        str,
        "auto",
        "release-once (each training row released once through the method's mechanism after "
        "the data parties train their bottoms locally by DP-SGD on randomized-response labels; "
        "the head then trains on the releases) or split (the seed paper's split learning: "
        "every row released every epoch); auto: release-once for DP classification runs",
        choices=SCHEDULES,
    ),
    "label_epsilon": Option(
        parse_epsilon_or_same,
        "same",
        "release-once: epsilon of the randomized response on the labels the label holder sends "
        "to the data parties ('same': the run's --epsilon)",
        when=RELEASE_ONCE,
    ),
    "bottom_epochs": Option(
        parse_auto_int,
        "auto",
        "release-once: DP-SGD epochs of each data party's local bottom (one Gaussian release "
        f"of a row per epoch); auto: enough for {BOTTOM_STEPS} steps, between "
        f"{MIN_BOTTOM_EPOCHS} and {MAX_BOTTOM_EPOCHS}",
        when=RELEASE_ONCE,
    ),
    "release_shape": Option(
        str,
        "saturate",
        "release-once: saturate (each released row pushed to the edge of the bound, its "
        "direction kept: a sign per tanh coordinate, the C-sphere for a clipped row; under "
        "Gaussian noise the largest norm carries the most signal) or as-trained (the bounded "
        "bottom output as it is)",
        choices=("saturate", "as-trained"),
        when=RELEASE_ONCE,
    ),
    "own_model": Option(
        str,
        "auto",
        "release-once with --active-features: the label holder's own model in its head: "
        "columns (its columns into the head MLP), gbdt (also the log-odds of boosted trees "
        "on its columns alone, out of fold on the training rows) or auto (both heads trained, "
        "the one with the lower loss on held-out training rows kept); local, no budget spent",
        choices=OWN_MODELS,
        when=RELEASE_ONCE,
    ),
    "bottom_lr": Option(
        float,
        0.03,
        "release-once: Adam learning rate of the bottoms' DP-SGD",
        gt=0,
        le=10,
        when=RELEASE_ONCE,
    ),
}


def release_once(spec: RunSpec, method: Method, task: str | None = None) -> bool:
    """Whether this run uses the release-once schedule (``task``: None before data is loaded)."""
    schedule = spec.option("release_schedule", method)
    if schedule == "split":
        return False
    dp = spec.epsilon is not None and spec.option("bottom", method) == "dp"
    if schedule == "release-once":
        if not dp:
            raise ConfigError(
                f"schedule 'release-once' of method {method.name!r} needs --epsilon and "
                f"--bottom dp, got epsilon {spec.epsilon} and "
                f"bottom {spec.option('bottom', method)}"
            )
        return True
    return dp and task != "regression"


def release_defaults(method: type[Method], given: dict[str, Any]) -> dict[str, Any]:
    """Common-option defaults of a release-once run (applied only where not given)."""
    schedule = given.get("release_schedule", "auto")
    dp = given.get("epsilon") is not None and given.get("bottom", "dp") == "dp"
    if schedule == "split" or not dp:
        return {}
    out = dict(RELEASE_ONCE_DEFAULTS)
    if _binary(given.get("dataset")):
        out["embedding_dim"] = BINARY_EMBEDDING_DIM
    return out


def _binary(dataset: Any) -> bool:
    """Whether a catalogue dataset is a binary task (False for unknown or CSV data)."""
    from securevfl.data import list_datasets

    for info in list_datasets():
        if info.name == dataset:
            return info.task == "binary"
    return False


def release_plan(spec: RunSpec, method: Method, *, delta: float, n_train: int) -> ReleaseOncePlan:
    """The bottoms' DP-SGD (``grad_share`` of μ² over ``bottom_epochs``) and the labels' ε
    (``n_train``: public, sets the auto epochs)."""
    epochs = spec.option("bottom_epochs", method)
    if epochs == "auto":
        per_epoch = max(1, math.ceil(n_train / spec.batch_size))
        epochs = min(MAX_BOTTOM_EPOCHS, max(MIN_BOTTOM_EPOCHS, math.ceil(BOTTOM_STEPS / per_epoch)))
    share = float(spec.option("grad_share", method))
    sigma_g = grad_noise_multiplier(
        epsilon=float(spec.epsilon), delta=delta, epochs=epochs, share=share
    )
    label = spec.option("label_epsilon", method)
    return ReleaseOncePlan(
        bottom=BottomDP(float(spec.option("grad_clip", method)), sigma_g),
        bottom_epochs=int(epochs),
        bottom_lr=float(spec.option("bottom_lr", method)),
        label_epsilon=float(spec.epsilon) if label == "same" else float(label),
        bottom_batch=int(spec.batch_size),
        saturate=spec.option("release_shape", method) == "saturate",
        own_model=str(spec.option("own_model", method)),
    )


def bottom_events(plan: ReleaseOncePlan) -> list:
    """A training row's DP-SGD releases under release-once."""
    return [grad_event(plan.bottom.noise_multiplier, plan.bottom_epochs)]


def label_event(plan: ReleaseOncePlan) -> PureDpEvent:
    """The randomized response of a row's label (pure ε)."""
    return PureDpEvent(epsilon=plan.label_epsilon)


def release_record(ctx: RunContext, plan: ReleaseOncePlan) -> dict[str, Any]:
    """The record's description of the schedule (public settings only)."""
    return {
        "release_schedule": "release-once",
        "bottom_epochs": plan.bottom_epochs,
        "bottom_noise_multiplier": plan.bottom.noise_multiplier,
        "bottom_clip": plan.bottom.clip,
        "label_epsilon": plan.label_epsilon,
        "label_mechanism": f"randomized response over {int(ctx.info.n_classes or 2)} classes",
        "release_shape": "saturate" if plan.saturate else "as-trained",
        "own_model": plan.own_model,
        "amplification": "none (shuffled disjoint batches)",
    }


def accuracy_ceiling_extra(
    ctx: RunContext, *, mus: list[float] | None = None, epsilon: float | None = None, delta: float
) -> dict[str, Any]:
    """The accuracy no classifier of a test row's releases can exceed (``privacy.ceiling``), at
    the label holder, from its own test labels' class shares; empty where the label holder
    holds columns of its own (they are not released: no ceiling) or for regression.

    ``mus``: each passive party's Gaussian-DP μ for a test row (composed: √Σμ²; exact for two
    classes). ``epsilon``: the test row's (ε, δ) over all parties (PBM: not Gaussian), through
    the total-variation bound τ <= (e^ε - 1 + 2δ)/(e^ε + 1) of any (ε, δ)-DP release."""
    import math

    import numpy as np

    from securevfl.privacy.ceiling import accuracy_ceiling, composed_mu

    L = ctx.info.label_party
    if L in ctx.data_parties or ctx.info.task == "regression" or not ctx.rt.here(L):
        return {}
    y = np.asarray(ctx.views[L].y_test)
    priors = np.bincount(y, minlength=int(ctx.info.n_classes or 2)) / len(y)
    if mus is not None:
        mu = composed_mu(mus)
        return {"accuracy_ceiling": accuracy_ceiling(mu, priors.tolist()), "ceiling_mu": mu}
    tau = min(1.0, (math.exp(epsilon) - 1 + 2 * delta) / (math.exp(epsilon) + 1))
    p_max = float(priors.max())
    return {"accuracy_ceiling": p_max + (1 - p_max) * tau, "ceiling_epsilon": epsilon}


def gaussian_release_report(
    ctx: RunContext, plan: ReleaseOncePlan, *, sensitivity: float, delta: float
) -> tuple[Any, float, float]:
    """(report, σ, σ_test) of a release-once run whose mechanism is one Gaussian release of
    L2 sensitivity ``sensitivity`` per row and passive party.

    A training row: that release plus its ``bottom_epochs`` DP-SGD releases, composed exactly
    (Gaussian DP), σ calibrated so the party-row ε meets the target; a test row: one release
    whose σ_test gets the whole target (rows disjoint: ``with_test_rows``). The sample unit
    composes every passive party's releases of the row and the label's randomized response."""
    from securevfl.privacy.accountant import calibrate
    from securevfl.privacy.dp_bottom import test_noise_multiplier, with_test_rows
    from securevfl.privacy.events import gaussian_event
    from securevfl.privacy.shared_ledgers import composed_epsilon, shared_ledger

    eps = float(ctx.spec.epsilon)
    grads = tuple(bottom_events(plan))

    def train_eps(sigma: float) -> float:
        release = gaussian_event(sigma=sigma, sensitivity=sensitivity)
        return composed_epsilon(((release, 1), *((g, 1) for g in grads)), delta)

    sigma, _ = calibrate(train_eps, eps, lo=1e-4, hi=1e6, what="sigma")
    sigma_test = sensitivity * test_noise_multiplier(eps, delta)
    train_ops, test_ops = [], []
    for k in ctx.data_parties:
        if k == ctx.info.label_party:
            continue
        train_ops.append((k, gaussian_event(sigma=sigma, sensitivity=sensitivity), 1, True))
        train_ops.extend((k, g, 1, True) for g in grads)
        test_ops.append((k, gaussian_event(sigma=sigma_test, sensitivity=sensitivity), 1, True))
    train_ops.append((None, label_event(plan), 1, True))
    # one ledger object per process for these releases: repeated runs ask each question once
    ledger = shared_ledger("party-row", tuple(train_ops))
    test = shared_ledger("party-row", tuple(test_ops))
    report = ledger.report(
        delta,
        target_epsilon=eps,
        extra={
            **release_record(ctx, plan),
            "sigma": sigma,
            "sigma_test": sigma_test,
            "sensitivity": sensitivity,
            "releases_per_row": {"train": 1, "test": 1},
        },
    )
    return with_test_rows(report, test, delta), sigma, sigma_test
