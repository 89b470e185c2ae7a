"""Which ``--help`` group each run option is shown in: data, privacy, model, training, protocol or
output (issue 28). The common options are listed in display order; each method option is filed
by its name (one name means one thing across methods). A plugin's option that is not listed here
is shown under training."""

from __future__ import annotations

import sys

GROUP_TITLES = {
    "data": "data: which rows and columns, and how they are split across parties",
    "privacy": "privacy: the budget, the mechanism and what is released",
    "model": "model: what is trained",
    "training": "training: how it is optimised",
    "protocol": "protocol: how the parties talk (transport, cryptography, compression, timeouts)",
    "output": "output: what the run writes and prints",
}

COMMON_GROUPS = {
    "data": (
        "dataset",
        "data",
        "id_column",
        "label_column",
        "categories",
        "feature_column",
        "bounds",
        "parties",
        "partition",
        "n",
        "d",
        "sparsity",
        "encoding",
    ),
    "privacy": ("epsilon", "delta", "bounds_share", "reproducible_noise"),
    "model": ("model", "loss", "penalty", "lam", "embedding_dim", "hidden", "aggregation"),
    "training": ("epochs", "batch_size", "lr", "seed", "engine", "dask_scheduler"),
    "protocol": ("timeout",),
    "output": (),
}

_METHOD_GROUPS = {
    "data": ("active_features", "input_scaling", "offset", "own_model"),
    "privacy": (
        "b",
        "beta",
        "bottom",
        "budget",
        "calibration",
        "centre_share",
        "clip",
        "clip_mode",
        "clip_norm",
        "derivative_clip",
        "eval",
        "grad_clip",
        "grad_share",
        "l1_bound",
        "l2_bound",
        "label_epsilon",
        "mechanism",
        "offset_share",
        "party_epsilons",
        "release_schedule",
        "release_shape",
        "score_share",
        "stats_share",
        "variant",
    ),
    "model": (
        "intercept",
        "ridge",
        "threshold",
        "final_fit",
        "trees",
        "depth",
        "min_child_weight",
        "bins",
        "local_trees",
        "offset_splits",
        "offset_trees",
    ),
    "training": (
        "average",
        "bottom_epochs",
        "bottom_lr",
        "confidence",
        "deltas",
        "direction",
        "fcm_threshold",
        "head_epochs",
        "kl_every",
        "lam_cl",
        "lam_kl",
        "mu",
        "preset",
        "q",
        "rescale_gradient",
        "subsample",
        "colsample",
        "timed_batches",
        "timed_epochs",
        "tune",
    ),
    "protocol": (
        "ckks_coeff_bits",
        "ckks_degree",
        "ckks_mask_bits",
        "ckks_rows_per_ct",
        "ckks_scale_bits",
        "clip_range",
        "downlink_bits",
        "entropy_coding",
        "max_staleness",
        "mpc_impl",
        "paillier_bits",
        "paillier_randomness",
        "schedule",
        "scheme",
        "stochastic_rounding",
        "topk",
        "uplink_bits",
        "uplink_delta_bits",
    ),
    "output": ("curve_points",),
}
METHOD_OPTION_GROUP = {key: g for g, keys in _METHOD_GROUPS.items() for key in keys}
FALLBACK_GROUP = "training"


def group_of(key: str) -> str:
    """The ``--help`` group of a method option."""
    return METHOD_OPTION_GROUP.get(key, FALLBACK_GROUP)


def method_description(cls: type) -> str:
    """One paragraph on a method for ``run M --help``: its summary, the first paragraph of its
    module's docstring, its privacy unit and models."""
    doc = (sys.modules[cls.__module__].__doc__ or "").strip().split("\n\n")[0]
    parts = [f"{cls.name}: {cls.summary}."]
    if doc:
        parts.append(" ".join(doc.split()))
    unit = getattr(cls, "privacy_unit", None)
    facts = [f"family {cls.family}"] if getattr(cls, "family", None) else []
    facts += [f"privacy unit '{unit}'"] if unit else []
    facts += [f"models: {', '.join(cls.models)}"] if getattr(cls, "models", None) else []
    if facts:
        parts.append("(" + "; ".join(facts) + ".)")
    return " ".join(parts)
