"""SecureBoost (Cheng et al. 2021): vertical gradient-boosted trees under Paillier encryption,
and ``secureboost-dp``, its variant with Gaussian noise on the bin sums the label holder opens.

Party 0 (the label holder) holds the labels and the Paillier secret key; every data party
holds its columns, bins them by their public domain (``models.boosted_trees``) and sums the
label holder's encrypted gradients per bin (``secureboost_protocol``). The label holder picks
each split by XGBoost's gain (λ = ``--lam``, ``--min-child-weight``); a split on a partner's
column is kept by its owner (a lookup table of column and bin); the label holder's skeleton
names only (party, record id). Scoring routes each row through the owners
(``training.tree_routing``), at test time and in ``securevfl predict`` alike.

What each party learns (the record's ``extra.leaks``; docs/threat-model.md):
* a data party: the instance space (which sampled rows are in which node) of every node at
  every level of every tree it is asked to sum for, hence the row partition of every split, the
  label holder's and the other partners' included; its own splits' thresholds; nothing of the
  gradients (semantically secure encryption, re-randomised replies);
* the label holder: for every partner column (in an order the partner draws per tree) the
  per-bin sums of g and h at every node; which public bin edge a partner split cuts, not the
  column; the row partition at every partner split; each row's path at scoring.
``--local-trees N`` grows the first N trees on the label holder's columns alone (no partner
sees or releases anything in them); ``secureboost-dp`` adds Gaussian noise to the bin sums
(``privacy.boost_dp``: unit party-row, the partitions outside the guarantee) and takes a
partner split only where its least gain consistent with the noise beats the label holder's
exact ones (``models.boosted_trees.noisy_gain_floor``; post-processing, no change to ε).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from protocols import paillier_he as ph
from securevfl.context import RunContext, fingerprint
from securevfl.errors import ConfigError
from securevfl.methods.base import Method, register_method
from securevfl.methods.secureboost_train import BoostConfig, train_boost
from securevfl.models.boosted_trees import bin_index
from securevfl.options import Option
from securevfl.privacy import boost_dp
from securevfl.results import FitResult, ModelPart, RunStats
from securevfl.training.tree_routing import route_margins

DEFAULT_DELTA = 1e-5
LEAKS = {
    "data party": "the instance space of every node it sums for (every split's row partition, "
    "the label holder's included) and its own thresholds; no gradient",
    "label holder": "per-bin (g, h) sums of every partner column at every node (columns in a "
    "per-tree order the partner draws), the bin edge of each partner split, the row partition "
    "at every partner split, each scored row's path",
}

# secureboost-dp's ceiling: the same run with its noise removed, i.e. ``secureboost`` on the same
# data with the same settings (the key size changes no figure). A party cannot compute it (it
# needs the partners' exact sums), so the record names it and the report reads it from the
# twin's records (bench/reports/secureboost.py).
NOISE_REMOVED = {
    "kind": "noise removed",
    "method": "secureboost",
    "same": "dataset, parties, seed (so the train/test split), partition and the extra's tree "
    "settings",
}


@register_method
class SecureBoost(Method):
    name = "secureboost"
    summary = (
        "SecureBoost: vertical boosted trees, Paillier-encrypted gradients summed per public "
        "bin by each party, thresholds kept by their owners"
    )
    family = "he"
    models = ("gbdt",)
    options = {
        "trees": Option(int, 20, "boosting rounds (one tree each)", ge=1, le=10_000),
        "depth": Option(int, 3, "levels of splits per tree", ge=1, le=12),
        "min_child_weight": Option(
            float, 1.0, "least hessian sum in each child of a split", ge=0, le=1e9
        ),
        "subsample": Option(float, 1.0, "share of rows drawn per tree", gt=0, le=1),
        "colsample": Option(float, 1.0, "share of each party's columns drawn per tree", gt=0, le=1),
        "bins": Option(int, 32, "equal-width bins of each column's public domain", ge=2, le=1024),
        "local_trees": Option(
            int, 0, "first trees grown on the label holder's columns alone", ge=0, le=10_000
        ),
        "paillier_bits": Option(
            int, 2048, "Paillier modulus bits (a multiple of 8)", ge=ph.MIN_KEY_BITS, le=16384
        ),
        "paillier_randomness": Option(
            str,
            "djn",
            "encryption randomness: full (r^n) or djn (fixed-base short exponent, faster)",
            choices=("full", "djn"),
        ),
    }

    @classmethod
    def common_defaults(cls, given: dict[str, Any]) -> dict[str, Any]:
        """XGBoost's defaults: learning rate (--lr) 0.3, λ (--lam) 1."""
        return {"lr": 0.3, "lam": 1.0}

    @classmethod
    def capabilities(cls, model: str | None = None) -> dict[str, Any]:
        return {**super().capabilities(model), "architecture": "trees"}

    def validate(self, spec) -> None:
        super().validate(spec)
        bits = spec.option("paillier_bits", self)
        if bits % 8:
            raise ConfigError(f"paillier_bits must be a multiple of 8, got {bits!r}")

    def message_bound(self, spec, info) -> int:
        """Bytes of the largest message (``runtime.frame_limits``): a tree's encrypted
        gradients, a level's packed bin sums, or one routing round's queries."""
        from protocols.paillier_pack import capacity

        o = lambda name: spec.option(name, self)  # noqa: E731
        ct = int(o("paillier_bits")) // 4 + 16  # one ciphertext, its framing
        grads = info.n_train * (ct + 16)
        cells = 2 ** (int(o("depth")) - 1) * max(info.features_per_party) * int(o("bins"))
        sums = -(-cells // max(1, capacity(int(o("paillier_bits")), 128))) * ct
        routing = max(info.n_train, info.n_test) * int(o("trees")) * 8
        return max(grads, sums, routing)

    def config(self, ctx: RunContext, sigma: float | None = None) -> BoostConfig:
        if ctx.info.task not in ("binary", "regression"):
            raise ConfigError(
                f"{self.name} trains binary classification or regression: dataset task must "
                f"be one of those, got {ctx.info.task!r} ({ctx.info.dataset})"
            )
        o = lambda name: ctx.spec.option(name, self)  # noqa: E731
        return BoostConfig(
            trees=int(o("trees")),
            depth=int(o("depth")),
            lr=float(ctx.spec.lr if ctx.spec.lr is not None else 0.3),
            lam=float(ctx.spec.lam),
            min_child=float(o("min_child_weight")),
            subsample=float(o("subsample")),
            colsample=float(o("colsample")),
            n_bins=int(o("bins")),
            local_trees=int(o("local_trees")),
            bits=int(o("paillier_bits")),
            djn=o("paillier_randomness") == "djn",
            task=ctx.info.task,
            noise_multiplier=sigma,
        )

    def privacy(self, ctx: RunContext, cfg: BoostConfig) -> tuple[float | None, Any]:
        """No noise, no ε (the variant overrides)."""
        return None, None

    def fit(self, ctx: RunContext) -> FitResult:
        cfg = self.config(ctx)
        sigma, report = self.privacy(ctx, cfg)
        cfg = self.config(ctx, sigma)
        st, train_s = train_boost(ctx, cfg)
        rt, L = ctx.rt, ctx.info.label_party
        bins_test = {
            k: bin_index(ctx.views[k].X_test, cfg.n_bins, ctx.info.row_norm_bound_sq)
            for k in st.lookups
        }
        with rt.meter.in_phase("eval"):
            margin = route_margins(
                rt,
                label_party=L,
                parties=list(ctx.data_parties),
                depth=cfg.depth,
                trees=st.trees,
                lookups=st.lookups,
                bins=bins_test,
                n_rows=ctx.info.n_test,
            )
        scores = None
        link = "sigmoid" if cfg.task == "binary" else "identity"
        if margin is not None:
            scores = 1.0 / (1.0 + np.exp(-margin)) if link == "sigmoid" else margin
        model, fps = {}, {}
        for k, lookup in st.lookups.items():
            arrays = lookup.to_arrays()
            if k == L:
                arrays.update(st.trees.to_arrays())
            meta = {"bins": cfg.n_bins, "depth": cfg.depth, "link": link, "secret_files": []}
            model[k] = ModelPart("trees", arrays, meta | ({"head": True} if k == L else {}))
            fps[k] = fingerprint(*[arrays[n] for n in sorted(arrays)])
        stats = RunStats(
            epoch_s=[round(t, 4) for t in st.tree_s],
            phases_s={k: round(v, 4) for k, v in sorted(st.phases_s.items())},
            setup_s=round(st.phases_s.get("setup", 0.0), 6),
        )
        extra = {
            "trees": cfg.trees,
            "depth": cfg.depth,
            "bins": cfg.n_bins,
            "paillier_bits": cfg.bits,
            "leaks": LEAKS,
            "local_trees": cfg.local_trees,
            "lr": cfg.lr,
            "lam": cfg.lam,
            "min_child_weight": cfg.min_child,
            "subsample": cfg.subsample,
            "colsample": cfg.colsample,
        }
        if cfg.noise_multiplier is not None:
            extra["ceiling"] = NOISE_REMOVED
        if st.trees is not None:
            extra["nodes"] = len(st.trees.owner)
            extra["splits_by_party"] = {
                str(k): int(np.sum(np.asarray(st.trees.owner) == k)) for k in ctx.data_parties
            }
        return FitResult(
            scores, train_s, privacy=report, fingerprints=fps, stats=stats, extra=extra, model=model
        )


@register_method
class SecureBoostDP(SecureBoost):
    name = "secureboost-dp"
    summary = (
        "SecureBoost with Gaussian noise added under encryption to every bin sum the label "
        "holder opens (ε per partner row; row partitions outside the guarantee)"
    )
    family = "dp"
    requires_epsilon = True

    def privacy(self, ctx: RunContext, cfg: BoostConfig) -> tuple[float | None, Any]:
        """Calibrate σ so that each partner's ε (party-row, ``privacy.boost_dp``) meets
        ``--epsilon``; the ledger composes exactly the releases the run makes."""
        from securevfl.privacy.accountant import PrivacyLedger

        delta = ctx.spec.delta or DEFAULT_DELTA
        L = ctx.info.label_party
        partners = [k for k in ctx.data_parties if k != L]
        releases = cfg.partner_trees() * cfg.depth
        cols = {k: cfg.columns_used(ctx.info.features_per_party[k]) for k in partners}
        widest = max(cols.values(), default=0)
        if not releases or not widest:
            raise ConfigError(
                f"{self.name} needs partner trees to add noise to, got --trees {cfg.trees} and "
                f"--local-trees {cfg.local_trees} with {len(partners)} partner(s)"
            )
        sigma, _ = boost_dp.calibrate_sigma(float(ctx.spec.epsilon), widest, releases, delta)
        ledger = PrivacyLedger("party-row")
        for k in partners:
            ledger.compose(k, boost_dp.histogram_event(sigma, cols[k], releases))
        report = ledger.report(
            delta,
            target_epsilon=ctx.spec.epsilon,
            per_party_extra={
                k: {"sigma": sigma, "sensitivity": boost_dp.level_sensitivity(c)}
                for k, c in cols.items()
            },
            outside_guarantee=boost_dp.OUTSIDE_GUARANTEE,
            extra={
                "sigma": sigma,  # per normalised slot; each release's multiplier is σ / Δ
                "releases_per_partner": releases,
                "columns_per_release": {str(k): v for k, v in cols.items()},
                "grad_bounds": list(cfg.grad_bounds()),
            },
        )
        return sigma, report
