"""What each trainer hands ``--save``: every local party's trained part as plain arrays.

One hook per trainer (GLM and split-NN), so every method built on them exports the same way:
a GLM party's part is the weights it scored the test split with (HDP-VFL's noisy ones: the
weights it released), the label holder's adds the bias; a split-NN party's part is its bottom,
the label holder's adds the head. Torch modules are flattened to an allow-list of layers
(linear, relu, tanh; corners and sphere, the release shapes; the CNN bottom's placement,
conv2d, maxpool2d, adaptive_avgpool2d, flatten) and their arrays, so a saved model never needs
code to load (``securevfl.model.layers`` rebuilds them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from securevfl.context import RunContext
from securevfl.results import ModelPart

if TYPE_CHECKING:  # torch is imported where a split-NN is flattened: a GLM run never loads it
    from torch import nn


class NotExportable(Exception):
    """A trained state that the model format cannot hold (the message says which part)."""


LINKS = {"logistic": "sigmoid", "least-squares": "identity"}


def flatten_module(module: nn.Module, prefix: str) -> tuple[list[dict[str, Any]], dict]:
    """(layer specs, arrays) of a module built from the allow-listed layers (Sequential, Linear,
    ReLU, Tanh, the release shapes, and the CNN bottom's: its pixel placement, Conv2d,
    MaxPool2d, AdaptiveAvgPool2d, Flatten); ``securevfl.model.layers`` rebuilds them."""
    from torch import nn

    from securevfl.models.conv_bottom import ConvBottom
    from securevfl.models.release_shapes import Corners, Sphere

    layers: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}

    def walk(m: nn.Module) -> None:
        i = len(layers)
        if isinstance(m, nn.Sequential):
            for child in m:
                walk(child)
        elif isinstance(m, ConvBottom):  # its pixels placed by a constant index, then its net
            layers.append(
                {"type": "place", "in": m.n_columns, "rows": m.rows, "width": m.width,
                 "input_scale": m.input_scale}
            )  # fmt: skip
            arrays[f"{prefix}{i}.index"] = m.index.numpy().astype(np.int64)
            walk(m.net)
        elif isinstance(m, nn.Linear):
            layers.append({"type": "linear", "in": m.in_features, "out": m.out_features})
            arrays[f"{prefix}{i}.weight"] = m.weight.detach().numpy().copy()
            arrays[f"{prefix}{i}.bias"] = m.bias.detach().numpy().copy()
        elif isinstance(m, nn.Conv2d) and _plain_conv(m):
            layers.append(
                {"type": "conv2d", "in": m.in_channels, "out": m.out_channels,
                 "kernel": list(m.kernel_size), "padding": list(m.padding),
                 "stride": list(m.stride)}
            )  # fmt: skip
            arrays[f"{prefix}{i}.weight"] = m.weight.detach().numpy().copy()
            arrays[f"{prefix}{i}.bias"] = m.bias.detach().numpy().copy()
        elif isinstance(m, nn.MaxPool2d) and _plain_pool(m):
            layers.append(
                {"type": "maxpool2d", "kernel": list(_pair(m.kernel_size)),
                 "stride": list(_pair(m.stride))}
            )  # fmt: skip
        elif isinstance(m, nn.AdaptiveAvgPool2d) and None not in _pair(m.output_size):
            layers.append({"type": "adaptive_avgpool2d", "out": list(_pair(m.output_size))})
        elif isinstance(m, nn.Flatten) and (m.start_dim, m.end_dim) == (1, -1):
            layers.append({"type": "flatten"})
        elif isinstance(m, (nn.ReLU, nn.Tanh)):
            layers.append({"type": type(m).__name__.lower()})
        elif isinstance(m, (Corners, Sphere)):  # release-once's saturation (no arrays)
            layers.append({"type": type(m).__name__.lower(), "bound": m.bound})
        else:
            raise NotExportable(f"layer {type(m).__name__}")

    walk(module)
    return layers, arrays


def _pair(v: Any) -> tuple[Any, Any]:
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def _plain_conv(m: nn.Conv2d) -> bool:
    """A convolution the saved format rebuilds as it ran (zero padding given as numbers, no
    dilation or groups, a bias)."""
    return (
        m.padding_mode == "zeros"
        and not isinstance(m.padding, str)
        and m.dilation == (1, 1)
        and m.groups == 1
        and m.bias is not None
    )


def _plain_pool(m: nn.MaxPool2d) -> bool:
    return _pair(m.padding) == (0, 0) and _pair(m.dilation) == (1, 1) and not m.ceil_mode


def export_glm(
    ctx: RunContext, state: Any, *, scored: dict[int, np.ndarray], loss_name: str
) -> dict:
    """Each local data party's GLM weights (those it scored with), party 0's with the bias;
    ``loss_name``: the GLM loss the run trained (its link function scores new rows)."""
    link = LINKS.get(loss_name)
    parts = {}
    for k, w in state.w.items():
        arrays = {"w": np.asarray(scored.get(k, w), dtype=np.float64).copy()}
        meta: dict[str, Any] = {}
        if k == 0:
            arrays["bias"] = np.array([state.bias], dtype=np.float64)
            meta = {"head": True, "link": link}
            if state.passive_scale:  # HDP-VFL's refit: the label holder scales each passive
                meta["passive_scale"] = {str(j): float(a) for j, a in state.passive_scale.items()}
        parts[k] = ModelPart("linear", arrays, meta)
    return parts


def export_splitnn(
    ctx: RunContext,
    state: Any,
    *,
    aggregation: str,
    release: dict[str, Any] | None = None,
    party_release: dict[int, dict[str, Any] | None] | None = None,
    head: nn.Module | None = None,
    head_input: dict[str, Any] | None = None,
) -> dict:
    """Each local data party's bottom, the label holder's part with the head.

    ``release``: how a bottom's message is released when a row is scored (a private scoring
    path that predict replays with fresh noise), recorded at the label holder for the
    accounting; ``party_release``: party k's own (its rescaling factor, say), None where k's
    message is not released through it (the label holder's own bottom: ``own_message``
    plain); ``head``/``head_input``: a head other than ``state.top`` and how its input is
    built (release-once: the label holder's own columns prepended to the aggregate,
    standardised by ``head_mean``/``head_scale``; ``scale``: the aggregate multiplied by
    ``head_input_scale`` first)."""
    parts: dict[int, ModelPart] = {}
    L = ctx.info.label_party
    for k, m in state.bottoms.items():
        layers, arrays = flatten_module(m, "bottom.")
        meta: dict[str, Any] = {"bottom_layers": layers}
        mine = release if party_release is None else party_release.get(k, release)
        if mine is not None:
            meta["release"] = dict(mine)
        elif release is not None and k == L:  # its own embedding enters its head as it is
            meta["own_message"] = "plain"
        parts[k] = ModelPart("splitnn", arrays, meta)
    top = head if head is not None else state.top
    if top is not None:
        layers, arrays = flatten_module(top, "head.")
        for name, a in (head_input or {}).pop("arrays", {}).items():
            a = np.asarray(a)  # float64 stays float64: the scaling is applied as it ran
            arrays[name] = a.astype(np.float64 if a.dtype == np.float64 else np.float32)
        part = parts.setdefault(L, ModelPart("splitnn", {}, {}))
        part.arrays.update(arrays)
        part.meta.update(
            {
                "head": True,
                "head_layers": layers,
                "aggregation": aggregation,
                "link": "identity" if ctx.info.task == "regression" else "softmax",
                **({"head_input": head_input} if head_input else {}),
            }
        )
        if release is not None:
            part.meta.setdefault("release", dict(release))
    return parts


def export_private(
    ctx: RunContext,
    state: Any,
    hooks: Any,
    release: dict[str, Any],
    *,
    width: int,
    head: nn.Module | None = None,
    head_input: dict[str, Any] | None = None,
) -> tuple[dict | None, str | None]:
    """``try_export`` of a private scoring path (split-NN hooks): each bottom's message as
    ``hooks.message_release`` says, the aggregate (``width`` columns) scaled as
    ``hooks.aggregate_scale`` says before the head."""
    party = {k: hooks.message_release(ctx, k, release) for k in state.bottoms}
    how = dict(head_input or {})
    scale = hooks.aggregate_scale(ctx, width) if ctx.rt.here(ctx.info.label_party) else None
    if scale is not None:
        how["scale"] = True
        how["arrays"] = {**how.get("arrays", {}), "head_input_scale": np.asarray(scale)}
    return try_export(
        export_splitnn,
        ctx,
        state,
        aggregation=hooks.aggregation,
        release=release,
        party_release=party,
        head=head,
        head_input=how or None,
    )


def pooled_linear(w: np.ndarray, bias: np.ndarray, *, link: str, **transform: Any) -> ModelPart:
    """A pooled baseline's linear model: one part, at party 0, over every column.

    ``transform``: ``input_scale`` (rows multiplied by it), ``input_clip`` (then clipped to
    [-c, c]), ``input_l1`` / ``input_l2`` (then each row scaled down to that L1 / L2 norm),
    ``intercept`` (a constant 1 prepended; its weight is ``w[0]``)."""
    arrays = {"w": np.asarray(w, dtype=np.float64).copy()}
    arrays["bias"] = np.atleast_1d(np.asarray(bias, dtype=np.float64)).copy()
    return ModelPart("linear", arrays, {"head": True, "link": link, "pooled": True, **transform})


def try_export(fn: Any, *args: Any, **kwargs: Any) -> tuple[dict | None, str | None]:
    """(parts, None), or (None, the reason) when the state holds a layer the format cannot."""
    try:
        return fn(*args, **kwargs), None
    except NotExportable as exc:
        return None, f"its model holds a {exc} that the saved-model format cannot hold yet"
