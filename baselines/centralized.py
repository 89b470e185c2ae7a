"""Centralized baselines on pooled data: the reference a federated method is measured against.

``centralized`` fits scikit-learn's logistic regression (binary) or ridge regression (regression)
for ``--model glm``, the same torch MLP as the split-NN (bottom + top stacked) for
``--model mlp``, and scikit-learn's HistGradientBoosting (``models.trees``) for ``--model gbdt``,
on all columns pooled at one place.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from baselines.local import TREES_REFUSAL
from securevfl.context import RunContext, fingerprint
from securevfl.methods.base import Method, register_method
from securevfl.models.nets import pooled_mlp, seeded_init
from securevfl.models.trees import fit_trees, tree_scores
from securevfl.results import FitResult, ModelPart
from securevfl.rng import derive_seed
from securevfl.training import minibatches
from securevfl.training.export import flatten_module, pooled_linear
from securevfl.training.optimizer import adam
from securevfl.training.splitnn_trainer import DEFAULT_MLP_LR, _out_dim, _task_loss


@register_method
class Centralized(Method):
    name = "centralized"
    summary = (
        "pooled data at one place: scikit-learn GLM, the same MLP as the split-NN, or "
        "scikit-learn boosted trees"
    )
    family = "plain"
    models = ("glm", "mlp", "gbdt")
    pooled_data = True

    def fit(self, ctx: RunContext) -> FitResult:
        if not ctx.rt.here(0):
            return FitResult(None, 0.0)
        X, y, Xt, _ = ctx.pooled()
        t0 = time.perf_counter()
        if ctx.spec.model == "gbdt":
            model = fit_trees(X, y, ctx.info.task, ctx.shared_seed)
            scores = tree_scores(model, Xt, ctx.info.task)
            return FitResult(scores, time.perf_counter() - t0, model_refusal=TREES_REFUSAL)
        if ctx.spec.model == "glm":
            scores, fp, part = _fit_sklearn(ctx, X, y, Xt)
        else:
            scores, fp, part = _fit_mlp(ctx, X, y, Xt)
        return FitResult(scores, time.perf_counter() - t0, fingerprints={0: fp}, model={0: part})


def _fit_sklearn(ctx: RunContext, X, y, Xt):
    from sklearn.linear_model import LogisticRegression, Ridge  # here: ~1 s to import

    lam = ctx.spec.lam
    if ctx.info.task == "binary":
        # C = 1/(n*lam) matches the per-sample L2 strength lam/2 ||w||^2 of the GLM trainer
        C = 1.0 / (len(y) * lam) if lam > 0 else 1e6
        model = LogisticRegression(C=C, max_iter=5000).fit(X, y)
        part = pooled_linear(model.coef_[0], model.intercept_, link="sigmoid")
        return model.predict_proba(Xt)[:, 1], fingerprint(model.coef_, model.intercept_), part
    if ctx.info.task == "regression":
        model = Ridge(alpha=max(lam * len(y), 1e-8)).fit(X, y)
        part = pooled_linear(model.coef_, np.atleast_1d(model.intercept_), link="identity")
        return model.predict(Xt), fingerprint(model.coef_, np.atleast_1d(model.intercept_)), part
    model = LogisticRegression(max_iter=5000).fit(X, y)
    part = pooled_linear(model.coef_.T, model.intercept_, link="softmax")
    return model.predict_proba(Xt), fingerprint(model.coef_, model.intercept_), part


def _fit_mlp(ctx: RunContext, X, y, Xt):
    spec = ctx.spec
    net = seeded_init(
        pooled_mlp(X.shape[1], _out_dim(ctx), hidden=spec.hidden, embedding_dim=spec.embedding_dim),
        derive_seed(ctx.shared_seed, purpose="init/pooled"),
    )
    opt = adam(net.parameters(), lr=spec.lr if spec.lr is not None else DEFAULT_MLP_LR)
    Xtr = torch.as_tensor(X, dtype=torch.float32)
    for epoch in range(spec.epochs):
        for idx in minibatches(len(y), spec.batch_size, seed=ctx.shared_seed, epoch=epoch):
            opt.zero_grad()
            _task_loss(ctx, net(Xtr[idx]), y[idx]).backward()
            opt.step()
    with torch.no_grad():
        out = net(torch.as_tensor(Xt, dtype=torch.float32))
    scores = out[:, 0].numpy() if ctx.info.task == "regression" else torch.softmax(out, 1).numpy()
    layers, arrays = flatten_module(net[0], "bottom.")
    head_layers, head = flatten_module(net[1], "head.")
    link = "identity" if ctx.info.task == "regression" else "softmax"
    meta = {"bottom_layers": layers, "head": True, "head_layers": head_layers}
    part = ModelPart(
        "splitnn", {**arrays, **head}, {**meta, "aggregation": "sum", "link": link, "pooled": True}
    )
    fp = fingerprint(*[p.detach().numpy() for p in net.parameters()])
    return scores.astype(float), fp, part
