"""The label holder's side of scoring: a linear part's input transform, the link, and a
split-NN's head over the messages it received (:class:`securevfl.model.predict.Model` calls
these; a linear head is the few lines in ``Model._head``). ``model`` arguments are that
``Model``, typed ``Any``: importing it here would close an import circle."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from securevfl.errors import ProtocolError
from securevfl.model.files import ModelFileError
from securevfl.model.layers import rebuild_layers


def linear_input(meta: Mapping[str, Any], X: np.ndarray, *, head: bool) -> np.ndarray:
    """A linear part's input transform (fm-vfl: back to [-1, 1]; fm: L1- or L2-clipped rows;
    an intercept column)."""
    if meta.get("input_scale") is not None:
        X = X * float(meta["input_scale"])
    if meta.get("input_clip") is not None:
        c = float(meta["input_clip"])
        X = np.clip(X, -c, c)
    if meta.get("input_l1") is not None:  # fm-central: each whole row to L1 norm <= bound
        norms = np.abs(X).sum(axis=1, keepdims=True)
        X = X * np.minimum(1.0, float(meta["input_l1"]) / np.maximum(norms, 1e-300))
    if meta.get("input_l2") is not None:  # the Gaussian FM: each row (block) to L2 norm <= bound
        norms = np.sqrt(np.einsum("ij,ij->i", X, X))[:, None]
        X = X * np.minimum(1.0, float(meta["input_l2"]) / np.maximum(norms, 1e-300))
    if head and meta.get("intercept"):
        X = np.hstack([np.ones((X.shape[0], 1)), X])
    return X


def link(name: str, theta: np.ndarray) -> np.ndarray:
    from scipy.special import expit, softmax

    if name == "sigmoid":
        return expit(theta)
    if name == "softmax":
        return softmax(theta, axis=1)
    if name == "identity":
        return theta
    raise ModelFileError(f"link must be sigmoid, softmax or identity, got {name!r}")


def network_head(model: Any, own: np.ndarray | None, received: dict[int, Any]) -> np.ndarray:
    """A split-NN's head at the label holder: the received embeddings (a cascade client's
    decoded from its compressed bytes), its own where it sends one to itself, aggregated as in
    training, scaled and standardised as the card says; class probabilities or the value."""
    part = model.parts[model.label_party]
    meta = part.meta
    import torch

    from protocols.compress import decode

    # a cascade client's message is its compressed bytes: decoded as the server did
    msgs = {k: decode(v) if isinstance(v, bytes) else v for k, v in received.items()}
    counts = {k: len(v) for k, v in msgs.items()}
    if len(set(counts.values())) > 1:  # no own block to hold them to: they must agree
        raise ProtocolError(
            f"party {model.label_party} refused the messages at step 'predict messages': "
            f"the parties sent different row counts {counts}"
        )
    how = meta.get("head_input") or {}
    if own is not None and not how.get("own_columns"):
        msgs[model.label_party] = model.message(model.label_party, own)
    pieces = [np.asarray(msgs[k], dtype=np.float32) for k in sorted(msgs)]
    agg = np.sum(pieces, axis=0) if meta["aggregation"] == "sum" else np.concatenate(pieces, 1)
    if how.get("scale"):  # the label holder's per-column scaling of what it received
        scale = part.arrays.get("head_input_scale")
        if scale is None or scale.shape != (agg.shape[1],):
            raise ModelFileError(
                f"head_input_scale must have shape ({agg.shape[1]},), got "
                f"{None if scale is None else scale.shape}"
            )
        agg = (agg * scale).astype(np.float32)
    if how.get("own_columns"):  # release-once: [the label holder's own columns, aggregate]
        mine = np.zeros((len(agg), 0)) if own is None else own
        agg = np.concatenate([np.asarray(mine, dtype=np.float32), agg], axis=1)
    head = rebuild_layers(meta["head_layers"], part.arrays, "head.")
    with torch.no_grad():
        z = torch.as_tensor(agg, dtype=torch.float32)
        if how.get("standardise"):
            mean = torch.as_tensor(part.arrays["head_mean"], dtype=torch.float32)
            scale = torch.as_tensor(part.arrays["head_scale"], dtype=torch.float32)
            if mean.shape != (z.shape[1],) or scale.shape != (z.shape[1],):
                raise ModelFileError(
                    f"head_mean/head_scale must have shape ({z.shape[1]},), got "
                    f"{tuple(mean.shape)}/{tuple(scale.shape)}"
                )
            z = (z - mean) / scale
        out = head(z)
        if meta["link"] == "identity":
            return out[:, 0].numpy().astype(float)
        return torch.softmax(out, dim=1).numpy().astype(float)
