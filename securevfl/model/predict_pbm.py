"""pbm-vfl's private scoring, replayed by ``securevfl predict`` (issue 26).

A pbm-vfl model saved from a private scoring path (release-once, or the split schedule with
``--eval private``) carries its release in every part's ``meta.release`` (``PBMSecAggHooks.
scoring_release``): b and the test-row beta, the senders (the passive parties), the aggregator
(the label holder), the embedding width P, the bound C and δ. Predict scores each row the way a
test row was scored at training's end, with the training code itself: a fresh X25519 key
agreement among the senders (relayed by the aggregator, phase "setup"), then per batch each
sender's bottom embedding PBM-quantised (``pbm_quantize``, its noise from predict's stream),
masked (``SecAggParty.mask``), unmasked as a sum by the aggregator (``SecAggServer``) and
estimated (``pbm_estimate_sum``); the label holder's head runs on the estimate. All of it is
``PBMSecAggHooks`` over the predict runtime, so every byte is metered.

The ε of a scored row is that of its one release: P coordinates of PBM's dominating pair per
sender (unit party-row), or of the secure sum of all senders (unit sample), composed by the
PLD accountant, as the release-once record's ``test_row_epsilon``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from securevfl.model.files import ModelFileError

MECHANISM = "pbm-secagg"


def pbm_release(parts: dict[int, Any]) -> dict[str, Any] | None:
    """The checked PBM release of a loaded model's parts (None: not a PBM scoring path)."""
    rels = [p.meta["release"] for p in parts.values() if p.meta.get("release")]
    if not rels or not isinstance(rels[0], dict) or rels[0].get("mechanism") != MECHANISM:
        return None
    if any(r != rels[0] for r in rels):  # one release for every party, as in training
        raise ModelFileError(
            f"a pbm-vfl model's parts must carry one release, got {len(rels)} that differ"
        )
    return check_release(rels[0])


def check_release(rel: dict[str, Any]) -> dict[str, Any]:
    """The release's fields within the ranges training accepts (one line naming the rule)."""
    from protocols.secagg import MAX_BITS
    from securevfl.privacy.pbm import _GRID_BITS

    def need(ok: bool, what: str) -> None:
        if not ok:
            raise ModelFileError(f"a pbm-vfl part's release must have {what}, got {rel!r}")

    def is_int(v: Any) -> bool:
        return type(v) is int

    need(is_int(rel.get("b")) and 1 <= rel["b"] <= 1024, "b an integer in [1, 1024]")
    beta = rel.get("beta")
    need(isinstance(beta, float) and 2.0**-_GRID_BITS <= beta <= 0.25, "beta in [2^-12, 1/4]")
    senders = rel.get("senders")
    need(
        isinstance(senders, list) and all(is_int(k) and k >= 0 for k in senders),
        "senders a list of party indices",
    )
    need(len(set(senders)) == len(senders) >= 1, "distinct senders, at least one")
    need(rel.get("n_parties") == len(senders), "n_parties equal to the number of senders")
    need(is_int(rel.get("aggregator")) and rel["aggregator"] not in senders, "an aggregator")
    need((rel["b"] * len(senders)).bit_length() <= MAX_BITS, f"b * senders < 2^{MAX_BITS}")
    need(is_int(rel.get("dim")) and 1 <= rel["dim"] <= 4096, "dim an integer in [1, 4096]")
    need(rel.get("bound") == 1.0, "bound 1 (tanh-bounded embeddings)")
    delta = rel.get("delta")
    need(isinstance(delta, float) and 0.0 < delta < 1.0, "delta in (0, 1)")
    return rel


def _context(model: Any, rt: Any, rel: dict[str, Any], n_rows: int) -> Any:
    """A run context for the hooks: the card's spec and the public facts of the run."""
    from securevfl.context import PublicInfo, RunContext
    from securevfl.experiment import spec_from_dict

    card = model.card
    spec = spec_from_dict(dict(card["spec"]))
    # the hooks read the embedding width and batch size from the spec: the release's width
    spec = dataclasses.replace(spec, embedding_dim=int(rel["dim"]))
    fpp = tuple(int(f) for f in card.get("features_per_party") or ())
    server = model.n_parties - 1 if model.n_parties > model.data_parties else None
    info = PublicInfo(
        dataset=str(spec.dataset),
        task=model.task,
        n_classes=card.get("n_classes"),
        n_train=0,
        n_test=n_rows,
        n_features=sum(fpp),
        features_per_party=fpp,
        data_parties=model.data_parties,
        n_parties=model.n_parties,
        label_party=model.label_party,
        server=server,
        row_norm_bound_sq=model.bound_sq,
    )
    return RunContext(rt=rt, spec=spec, info=info, views={}, shared_seed=0)


def score_pbm(
    model: Any, rel: dict[str, Any], blocks: dict[int, np.ndarray], rt: Any
) -> np.ndarray | None:
    """Scores of prepared blocks through ``rel`` (``pbm_release``): PBM + secure aggregation,
    SPMD over ``rt``, phase 'predict'; at the label holder the head's scores, None elsewhere."""
    agg = pbm_aggregate(model, rel, blocks, rt)
    if agg is None:
        return None
    L = model.label_party
    own = blocks.get(L) if L < model.data_parties else None
    # the estimate of the senders' sum is the head's aggregate (one piece: summed as it is)
    return model._head(own, {-1: agg})


def pbm_aggregate(
    model: Any, rel: dict[str, Any], blocks: dict[int, np.ndarray], rt: Any
) -> np.ndarray | None:
    """The label holder's estimate of the senders' embedding sum, row by row (None elsewhere):
    a fresh key agreement, then per batch of the training batch size each local sender's
    ``party_message`` and the aggregator's ``aggregate`` (``PBMSecAggHooks``)."""
    import torch

    from securevfl.methods.dp_bottom_options import BottomPlan
    from securevfl.methods.pbm_hooks import PBMSecAggHooks
    from securevfl.model.layers import rebuild_layers
    from securevfl.training.loop import eval_batches

    L, senders = model.label_party, list(rel["senders"])
    if rel["aggregator"] != L:
        raise ModelFileError(
            f"a pbm-vfl release's aggregator must be the label holder {L}, got {rel['aggregator']}"
        )
    if any(k >= model.data_parties for k in senders):
        raise ModelFileError(
            f"a pbm-vfl release's senders must be data parties (< {model.data_parties}), got "
            f"{senders}"
        )
    local = {k: v for k, v in blocks.items() if v is not None}
    counts = {len(v) for v in local.values()}
    if len(counts) != 1:
        raise ModelFileError(f"every local block must hold the same rows, got counts {counts}")
    n = counts.pop()
    if n == 0:
        raise ModelFileError("scoring needs >= 1 row, got 0")
    ctx = _context(model, rt, rel, n)
    hooks = PBMSecAggHooks(
        ctx,
        b=int(rel["b"]),
        beta=float(rel["beta"]),
        eval_mode="private",
        plan=BottomPlan(None, 1),
        senders=senders,
        aggregator=L,
    )
    # predict's own noise streams (the CSPRNG, or the reproduction mode's seed), not the run's
    hooks.rngs = {k: model._rng(k) for k in hooks.rngs}
    bottoms = {
        k: rebuild_layers(model.parts[k].meta["bottom_layers"], model.parts[k].arrays, "bottom.")
        for k in senders
        if rt.here(k)
    }
    outs = []
    with rt.meter.in_phase("predict"), torch.no_grad():
        hooks.key_agreement(ctx)  # a fresh session: its bytes in phase "setup"
        for batch in eval_batches(n, ctx.spec.batch_size, 0):
            hooks.begin_batch(ctx, batch)
            rows = slice(batch.start, batch.start + batch.size)
            msgs: dict[int, Any] = dict.fromkeys(senders)
            for k, bottom in bottoms.items():
                emb = bottom(torch.as_tensor(local[k][rows], dtype=torch.float32)).numpy()
                if emb.shape[1] != ctx.spec.embedding_dim:  # the masks cover P per row
                    raise ModelFileError(
                        f"party {k}'s bottom must output the release's dim "
                        f"{ctx.spec.embedding_dim} values per row, got {emb.shape[1]}"
                    )
                msgs[k] = hooks.party_message(ctx, k, emb, 0)
            agg = hooks.aggregate(ctx, msgs, dst=L, step=0)
            if rt.here(L):
                outs.append(np.asarray(agg, dtype=np.float32))
    return np.concatenate(outs) if rt.here(L) else None


def scoring_privacy_pbm(rel: dict[str, Any]) -> tuple[dict[str, float], str, dict[str, Any]]:
    """(ε per scored row by unit, the release's description, its facts) of a PBM release, for
    ``predict_privacy``'s record."""
    from securevfl.privacy.pbm_accountant import pbm_epsilon

    b, beta, M, P = int(rel["b"]), float(rel["beta"]), int(rel["n_parties"]), int(rel["dim"])
    delta = float(rel["delta"])
    one = dict(b=b, beta=beta, n_parties=M, dim=P, uses=1, delta=delta, kind="pld")
    eps = {u: pbm_epsilon(u, **one) for u in ("party-row", "sample")}
    text = (
        f"each of the {M} passive parties' {P} embedding coordinate(s) of every scored row is "
        f"PBM-quantised (Binomial({b}, p), beta = {beta:.6g}) with fresh randomness and masked; "
        f"the label holder unmasks only the secure sum over the {M} parties, once per row, as "
        "a test row at training's end"
    )
    facts = {
        "delta": delta,
        "mechanism": MECHANISM,
        "b": b,
        "beta": beta,
        "secure_sum_parties": M,
        "dim": P,
        "accountant": "pld (dp_accounting), PBM's dominating pair, one use of P coordinates",
    }
    return eps, text, facts
