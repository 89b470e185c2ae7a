"""Which bottom model a data party builds: the MLP on its columns, or, with ``--model cnn`` on an
image dataset, the small CNN that puts its pixels back in their image rows."""

from __future__ import annotations

from torch import nn

from securevfl.context import RunContext
from securevfl.data import check_image_dataset
from securevfl.models.conv_bottom import conv_bottom
from securevfl.models.nets import bottom_mlp


def bottom_model(ctx: RunContext, k: int, *, bounded: bool) -> nn.Module:
    """Party ``k``'s (unseeded) bottom model; the CNN reads the party's global pixel indices
    (``views[k].columns``) and the dataset's public image shape."""
    spec = ctx.spec
    if spec.model == "cnn":
        shape = check_image_dataset(ctx.info.dataset, model=spec.model)
        cols = ctx.views[k].columns
        scale = ctx.info.row_norm_bound_sq**0.5  # back to pixel values (a public constant)
        return conv_bottom(
            cols, shape, spec.embedding_dim, hidden=spec.hidden, bounded=bounded, input_scale=scale
        )
    return bottom_mlp(
        ctx.info.features_per_party[k], spec.embedding_dim, hidden=spec.hidden, bounded=bounded
    )
