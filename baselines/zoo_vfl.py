"""ZOO-VFL (Zhang et al., 2021): every client estimates the gradient of its whole bottom model by
zeroth order: it uploads its embedding and its outputs at q perturbed copies of its weights (its
own private directions), the server returns the q loss differences, the client steps on
Avg-RandGradEst in the d-dimensional weight space (the server trains by first order, as in
VFL-CZOFO). ``--schedule async`` (default) is ZOO-VFL, ``sync`` Syn-ZOO-VFL."""

from __future__ import annotations

from securevfl.methods import register_method
from securevfl.methods.cascade_options import CascadeMethod, cascade_options


@register_method
class ZOOVFL(CascadeMethod):
    name = "zoo-vfl"
    summary = "ZOO-VFL: zeroth order on each client's whole model, FO server"
    family = "zo"
    client_grad = "zo-model"
    options = cascade_options(schedule="async", uplink_bits=32, downlink_bits=32, zo=True)
