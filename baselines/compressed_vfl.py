"""Compressed-VFL (Castiglia et al., 2022): first-order split learning with a server, whose clients
upload quantised (or top-k sparsified) embeddings; at 32 bits both ways it is plain split learning
in the server topology (both clients' traffic crosses the wire, unlike ``vfl``, whose label holder
also holds features)."""

from __future__ import annotations

from securevfl.methods import register_method
from securevfl.methods.cascade_options import CascadeMethod, cascade_options


@register_method
class CompressedVFL(CascadeMethod):
    name = "compressed-vfl"
    summary = "Compressed-VFL: FO split learning with a server, quantised embeddings"
    family = "plain"
    options = cascade_options(schedule="sync", uplink_bits=8, downlink_bits=32, zo=False)
