"""What each trainer hands ``--save``: every local party's trained part as plain arrays.

One hook per trainer (GLM and split-NN), so every method built on them exports the same way:
a GLM party's part is the weights it scored the test split with (HDP-VFL's noisy ones: the
weights it released), the label holder's adds the bias; a split-NN party's part is its bottom,
the label holder's adds the head. Torch modules are flattened to an allow-list of layers
(linear, relu, tanh; corners and sphere, the release shapes) and their float32 arrays, so a
saved model never needs code to load.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch import nn

from securevfl.context import RunContext
from securevfl.models.release_shapes import Corners, Sphere
from securevfl.results import ModelPart


class NotExportable(Exception):
    """A trained state that the model format cannot hold (the message says which part)."""


LINKS = {"logistic": "sigmoid", "least-squares": "identity"}


def flatten_module(module: nn.Module, prefix: str) -> tuple[list[dict[str, Any]], dict]:
    """(layer specs, arrays) of a module built from Sequential / Linear / ReLU / Tanh."""
    layers: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}

    def walk(m: nn.Module) -> None:
        if isinstance(m, nn.Sequential):
            for child in m:
                walk(child)
        elif isinstance(m, nn.Linear):
            i = len(layers)
            layers.append({"type": "linear", "in": m.in_features, "out": m.out_features})
            arrays[f"{prefix}{i}.weight"] = m.weight.detach().numpy().copy()
            arrays[f"{prefix}{i}.bias"] = m.bias.detach().numpy().copy()
        elif isinstance(m, (nn.ReLU, nn.Tanh)):
            layers.append({"type": type(m).__name__.lower()})
        elif isinstance(m, (Corners, Sphere)):  # release-once's saturation (no arrays)
            layers.append({"type": type(m).__name__.lower(), "bound": m.bound})
        else:
            raise NotExportable(f"layer {type(m).__name__}")

    walk(module)
    return layers, arrays


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
    head: nn.Module | None = None,
    head_input: dict[str, Any] | None = None,
) -> dict:
    """Each local data party's bottom, the label holder's part with the head.

    ``release``: how each bottom's message is released when a row is scored (a private
    scoring path that predict replays with fresh noise); ``head``/``head_input``: a head
    other than ``state.top`` and how its input is built (release-once: the label holder's own
    columns prepended to the aggregate, standardised by ``head_mean``/``head_scale``)."""
    parts: dict[int, ModelPart] = {}
    for k, m in state.bottoms.items():
        layers, arrays = flatten_module(m, "bottom.")
        meta: dict[str, Any] = {"bottom_layers": layers}
        if release is not None:
            meta["release"] = dict(release)
        parts[k] = ModelPart("splitnn", arrays, meta)
    L = ctx.info.label_party
    top = head if head is not None else state.top
    if top is not None:
        layers, arrays = flatten_module(top, "head.")
        for name, a in (head_input or {}).pop("arrays", {}).items():
            arrays[name] = np.asarray(a, dtype=np.float32).copy()
        part = parts.setdefault(L, ModelPart("splitnn", {}, {}))
        part.arrays.update(arrays)
        part.meta.update(
            {
                "head": True,
                "head_layers": layers,
                "aggregation": aggregation,
                "link": "identity" if ctx.info.task == "regression" else "softmax",
                **({"head_input": head_input} if head_input else {}),
                **({"release": dict(release)} if release is not None else {}),
            }
        )
    return parts


def pooled_linear(w: np.ndarray, bias: np.ndarray, *, link: str, **transform: Any) -> ModelPart:
    """A pooled baseline's linear model: one part, at party 0, over every column.

    ``transform``: ``input_scale`` (rows multiplied by it), ``input_clip`` (then clipped to
    [-c, c]), ``input_l1`` (then each row scaled down to L1 norm <= it), ``intercept`` (a
    constant 1 prepended; its weight is ``w[0]``)."""
    arrays = {"w": np.asarray(w, dtype=np.float64).copy()}
    arrays["bias"] = np.atleast_1d(np.asarray(bias, dtype=np.float64)).copy()
    return ModelPart("linear", arrays, {"head": True, "link": link, "pooled": True, **transform})


def try_export(fn: Any, *args: Any, **kwargs: Any) -> tuple[dict | None, str | None]:
    """(parts, None), or (None, the reason) when the state holds a layer the format cannot."""
    try:
        return fn(*args, **kwargs), None
    except NotExportable as exc:
        return None, f"its model holds a {exc} that the saved-model format cannot hold yet"
