"""Opacus DP-SGD on pooled data: the field's library as a central reference (issue 25).

The model is the split-NN's own, stacked at one place (``--model mlp``: ``pooled_mlp``, the
bottom MLP then the top MLP; ``--model glm``: one linear layer, i.e. multinomial logistic
regression), trained on all columns pooled, with Opacus's ``DPOptimizer`` (per-example gradients
clipped to ``--clip``, Gaussian noise of multiplier σ).

Neighbouring relation: replace-one (one row and its label replaced; n is public, so the record
may print ``n_train`` and the sample rate and steps that follow from it). Each step takes every
row independently with probability q = 1 / ceil(n / b) (Poisson), so two replace-one neighbours'
clipped sums differ by at most 2C when the row is in the batch: the dominating pair is
(1-q)N(0, σ²) + qN(±1, σ²) per step (dp_accounting's replace-one PLD of the Poisson-sampled
Gaussian). σ is calibrated here so that this replace-one ε over all steps meets ``--epsilon``;
``by_relation`` also gives Opacus's own add/remove ε of the same run (smaller: 4.00 replace-one
is about 3 add/remove).

Randomness: Opacus's secure_mode needs torchcsprng, which has no build for torch 2.x; instead
the Poisson batches and the Gaussian noise are drawn from securevfl's noise generator (the
AES-CTR CSPRNG in a private run, through its hardened Gaussian sampler), never from torch's
Mersenne Twister.
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np
import torch
from dp_accounting import NeighboringRelation
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from torch import nn

from securevfl.context import Option, RunContext, fingerprint
from securevfl.errors import ConfigError
from securevfl.methods.base import Method, register_method
from securevfl.models.nets import pooled_mlp, seeded_init
from securevfl.privacy.accountant import Accountant, calibrate
from securevfl.privacy.events import PrivacyReport, sampled_gaussian_event
from securevfl.results import FitResult, ModelPart
from securevfl.rng import derive_seed
from securevfl.training.export import flatten_module
from securevfl.training.optimizer import adam
from securevfl.training.splitnn_trainer import _out_dim, _task_loss

PIN = "opacus==1.6.0"
# Adam's step sizes, chosen on seeds 3-5 at ε = 1 (breast; phishing n = 4,000 seeds 3-4):
# GLM lr 0.05 0.891 / 0.919, 0.2 0.938 / 0.919; MLP lr 0.01 0.628 (the majority class: its
# logits stay near the start's) / 0.914, 0.03 0.838 / 0.897, 0.1 0.87 but 0.853 at ε = 8 (0.03:
# 0.962): 0.03, the one that leaves the majority class on breast
DEFAULT_GLM_LR = 0.2
DEFAULT_NET_LR = 0.03


def _opacus():
    try:
        import opacus
    except ImportError:
        raise ConfigError(f"method opacus-dpsgd needs the opacus package ({PIN})") from None
    return opacus


def _model(ctx: RunContext, d: int) -> nn.Module:
    spec = ctx.spec
    if spec.model == "glm":
        net: nn.Module = nn.Sequential(nn.Linear(d, _out_dim(ctx)))
    else:
        net = pooled_mlp(d, _out_dim(ctx), hidden=spec.hidden, embedding_dim=spec.embedding_dim)
    return seeded_init(net, derive_seed(ctx.shared_seed, purpose="init/pooled"))


def _export(ctx: RunContext, net: nn.Module) -> ModelPart:
    """The trained network (Opacus's wrapper removed) as one pooled part: the whole network as
    the "bottom", an empty head, the softmax (or identity) link of its test scoring."""
    layers, arrays = flatten_module(net, "bottom.")
    link = "identity" if ctx.info.task == "regression" else "softmax"
    meta = {"bottom_layers": layers, "head": True, "head_layers": [], "aggregation": "sum"}
    return ModelPart("splitnn", arrays, {**meta, "link": link, "pooled": True})


def releases(history: list[tuple[float, float, int]]) -> list[dict[str, object]]:
    """The run's (σ, q, steps) as a record's ``releases`` lines (replace-one)."""
    return [
        {
            "party": None,
            "mechanism": "poisson-sampled gaussian",
            "relation": "replace-one",
            "noise_multiplier": float(sigma),
            "sampling": float(q),
            "count": int(steps),
        }
        for sigma, q, steps in history
    ]


def replace_one_epsilon(history: list[tuple[float, float, int]], delta: float) -> float:
    """securevfl's PLD ε of the releases (σ, q, steps) read replace-one (two rows' clipped
    gradients are up to 2C apart: noise multiplier σC / 2C)."""
    acct = Accountant()
    for sigma, q, steps in history:
        acct.compose(sampled_gaussian_event(sigma=sigma, sensitivity=2.0, sampling=q), steps)
    return acct.get_epsilon(delta)


def _coarse_replace_one_epsilon(sigma: float, sampling: float, steps: int, delta: float) -> float:
    """An upper bound on :func:`replace_one_epsilon` for the calibration's search: the same
    dp_accounting PLD (pessimistic discretisation) on a 100x coarser grid, 50x faster (breast,
    q = 1/8, 80 steps: 4.9655 against 4.9624 at σ = 2)."""
    pld = pld_lib.from_gaussian_mechanism(
        sigma,
        sampling_prob=sampling,
        neighboring_relation=NeighboringRelation.REPLACE_ONE,
        value_discretization_interval=1e-2,
    )
    return float(pld.self_compose(steps).get_epsilon_for_delta(delta))


def calibrate_replace_one(
    *, epsilon: float, delta: float, sampling: float, steps: int
) -> tuple[float, float]:
    """(σ, ε): the noise multiplier whose replace-one ε over ``steps`` Poisson-sampled steps
    meets ``epsilon`` (the accountant's ``calibrate`` bisection on the coarse upper bound),
    and that σ's ε from the accountant (no larger than the bound, so it meets the target)."""
    sigma, _ = calibrate(
        lambda s: _coarse_replace_one_epsilon(s, sampling, steps, delta),
        epsilon,
        lo=0.3,
        hi=1e4,
        what="noise multiplier",
    )
    return sigma, replace_one_epsilon([(sigma, sampling, steps)], delta)


def poisson_batches(rng: np.random.Generator, n: int, q: float, steps: int):
    """Each step's rows: every row taken independently with probability q (from ``rng``)."""
    for _ in range(steps):
        yield np.flatnonzero(rng.random(n) < q)


def noise_from(opt, rng: np.random.Generator) -> None:
    """Make Opacus's optimizer draw its Gaussian noise from ``rng`` (our CSPRNG) instead of
    torch's generator: the same N(0, (σC)²) per coordinate, added where Opacus adds it."""
    from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed

    def add_noise() -> None:
        std = opt.noise_multiplier * opt.max_grad_norm
        for p in opt.params:
            _check_processed_flag(p.summed_grad)
            z = rng.normal(0.0, std, size=tuple(p.summed_grad.shape))
            noise = torch.as_tensor(z, dtype=p.summed_grad.dtype)
            p.grad = (p.summed_grad + noise).view_as(p)
            _mark_as_processed(p.summed_grad)

    opt.add_noise = add_noise


@register_method
class OpacusDPSGD(Method):
    name = "opacus-dpsgd"
    summary = "Opacus DP-SGD on pooled data: the split-NN's model, Opacus's RDP accountant"
    family = "dp"
    models = ("glm", "mlp")
    requires_epsilon = True
    pooled_data = True
    options = {
        "clip": Option(float, 1.0, "per-example gradient norm bound (max_grad_norm)", gt=0, le=1e6),
    }

    def fit(self, ctx: RunContext) -> FitResult:
        if not ctx.rt.here(0):
            return FitResult(None, 0.0)
        opacus = _opacus()
        spec = ctx.spec
        if not spec.delta:
            raise ConfigError(f"delta for opacus-dpsgd must be > 0, got {spec.delta}")
        X, y, Xt, _ = ctx.pooled()
        torch.manual_seed(derive_seed(ctx.shared_seed, purpose="opacus/torch"))
        net = _model(ctx, X.shape[1])
        default_lr = DEFAULT_GLM_LR if spec.model == "glm" else DEFAULT_NET_LR
        opt = adam(net.parameters(), lr=spec.lr if spec.lr is not None else default_lr)
        ds = torch.utils.data.TensorDataset(
            torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y)
        )
        n = len(y)
        per_epoch = math.ceil(n / min(spec.batch_size, n))
        q, steps = 1.0 / per_epoch, per_epoch * spec.epochs
        sigma, eps = calibrate_replace_one(
            epsilon=float(spec.epsilon), delta=float(spec.delta), sampling=q, steps=steps
        )
        # Opacus reads q = 1 / len(loader) off this loader; the batches come from ours below
        loader = torch.utils.data.DataLoader(ds, batch_size=math.ceil(n / per_epoch))
        rng = ctx.noise_rng(0, "opacus")
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # secure-mode and backward-hook notices
            engine = opacus.PrivacyEngine(accountant="rdp")
            net, opt, _ = engine.make_private(
                module=net,
                optimizer=opt,
                data_loader=loader,
                noise_multiplier=sigma,
                max_grad_norm=float(spec.option("clip", self)),
                poisson_sampling=False,
            )
            noise_from(opt, rng)
            Xs, ys = ds.tensors
            for rows in poisson_batches(rng, n, q, steps):  # an empty batch steps: noise only
                opt.zero_grad()
                _task_loss(ctx, net(Xs[rows]), ys[rows].numpy()).backward()
                opt.step()
        train_s = time.perf_counter() - t0
        history = [tuple(h) for h in engine.accountant.history]
        if [(float(a), float(b)) for a, b, _ in history] != [(sigma, q)] or sum(
            h[2] for h in history
        ) != steps:
            raise RuntimeError(f"opacus-dpsgd ran {history}, not {steps} steps at ({sigma}, {q})")
        net.eval()
        with torch.no_grad():
            out = net(torch.as_tensor(Xt, dtype=torch.float32))
        scores = (
            out[:, 0].numpy() if ctx.info.task == "regression" else torch.softmax(out, 1).numpy()
        )
        privacy = PrivacyReport(
            epsilon=eps,
            delta=float(spec.delta),
            accountant="pld (dp_accounting; Poisson-sampled Gaussian, replace-one)",
            unit="sample",
            target_epsilon=float(spec.epsilon),
            extra={
                "by_unit": {"sample": eps},
                "releases": releases([(sigma, q, steps)]),
                "relation": "replace-one (one row and its label replaced; n public)",
                "by_relation": {
                    "replace-one": eps,
                    "add-remove": float(engine.get_epsilon(float(spec.delta))),
                },
                "noise_multiplier": sigma,
                "sample_rate": q,
                "steps": steps,
                "max_grad_norm": float(spec.option("clip", self)),
                "noise_source": "securevfl's noise generator (Poisson batches and Gaussian "
                "noise; Opacus secure_mode needs torchcsprng, absent for torch 2.x)",
            },
        )
        params = [p.detach().numpy() for p in net.parameters()]
        return FitResult(
            np.asarray(scores, dtype=float),
            train_s,
            privacy=privacy,
            fingerprints={0: fingerprint(*params)},
            model={0: _export(ctx, getattr(net, "_module", net))},
        )
