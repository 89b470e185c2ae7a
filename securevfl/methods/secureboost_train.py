"""SecureBoost's boosting loop (SPMD): rounds of one tree each, grown level by level with the
encrypted-histogram protocol of :mod:`securevfl.methods.secureboost_protocol`."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from protocols import paillier_he as ph
from securevfl.errors import ProtocolError
from securevfl.methods import secureboost_protocol as sp
from securevfl.methods import secureboost_sums as hs
from securevfl.models.boosted_trees import (
    Lookup,
    TreeSet,
    bin_index,
    leaf_value,
    logistic_grad_hess,
    squared_grad_hess,
)
from securevfl.runtime.expect import Expect
from securevfl.training.tree_routing import route_margins

REGRESSION_GRAD_CLIP = 2.0  # |margin - y| bound of the squared loss (targets lie in [-1, 1])


@dataclass(frozen=True)
class BoostConfig:
    trees: int
    depth: int
    lr: float
    lam: float
    min_child: float
    subsample: float
    colsample: float
    n_bins: int
    local_trees: int
    bits: int
    djn: bool
    task: str
    noise_multiplier: float | None = None  # sigma of the DP variant (normalised units)

    def grad_bounds(self) -> tuple[float, float]:
        """(C_g, C_h): |g| and h bounds (logistic: 1 and 1/4; squared: the clip and 1)."""
        return (1.0, 0.25) if self.task == "binary" else (REGRESSION_GRAD_CLIP, 1.0)

    def columns_used(self, F: int) -> int:
        return max(1, int(round(self.colsample * F))) if F else 0

    def partner_trees(self) -> int:
        return max(0, self.trees - self.local_trees)


@dataclass
class BoostState:
    trees: TreeSet | None = None  # at L
    lookups: dict[int, Lookup] = field(default_factory=dict)  # every local data party's
    bins_train: dict[int, np.ndarray] = field(default_factory=dict)
    phases_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    tree_s: list[float] = field(default_factory=list)
    offloads: dict[int, Any] = field(default_factory=dict)  # --engine dask: a party's tasks


def _offloads(ctx: Any, keys: dict[int, Any]) -> dict[int, Any]:
    """Each local party's SecureBoost tasks on its Dask engine (none on the numpy engine)."""
    from securevfl.methods.secureboost_dask import BoostOffload

    out = {}
    for k, c in keys.items():
        engine = ctx.engine(k)
        client = getattr(engine, "client", None)
        if client is not None:
            out[k] = BoostOffload(client, c, timeout=engine.timeout)
    return out


def grad_hess(cfg: BoostConfig, y: np.ndarray, margin: np.ndarray):
    if cfg.task == "binary":
        return logistic_grad_hess(y, margin)
    return squared_grad_hess(y, margin, REGRESSION_GRAD_CLIP)


def base_margin(cfg: BoostConfig, y: np.ndarray) -> float:
    """The start margin: the training labels' log-odds (binary) or mean (regression)."""
    if cfg.task != "binary":
        return float(np.mean(y))
    p = float(np.clip(np.mean(y), 1e-6, 1 - 1e-6))
    return float(np.log(p / (1 - p)))


def train_boost(ctx: Any, cfg: BoostConfig) -> tuple[BoostState, float]:
    """Train every tree; returns the state (skeleton at L, lookups everywhere) and seconds."""
    rt, L, bound = ctx.rt, ctx.info.label_party, ctx.info.row_norm_bound_sq
    parties = list(ctx.data_parties)
    others = [k for k in parties if k != L]
    st = BoostState()
    for k in parties:
        if rt.here(k):
            st.lookups[k] = Lookup()
            st.bins_train[k] = bin_index(ctx.views[k].X_train, cfg.n_bins, bound)
    t0 = time.perf_counter()
    keys = sp.setup_keys(ctx, cfg.bits, cfg.djn) if cfg.partner_trees() and others else {}
    st.offloads = _offloads(ctx, keys)
    if L in st.offloads:  # every partner tree's randomness, computed ahead from now on
        st.offloads[L].schedule(_sample_size(ctx.info.n_train, cfg.subsample), cfg.partner_trees())
    st.phases_s["setup"] = time.perf_counter() - t0
    if ctx.audit is not None:  # ``securevfl audit``: its release view draws with these settings
        ctx.audit.saw(ctx, cfg)
    margin = y = None
    if rt.here(L):
        y = np.asarray(ctx.views[L].y_train, dtype=np.float64)
        st.trees = TreeSet(base=base_margin(cfg, y))
        margin = np.full(len(y), st.trees.base)
    rngs = {k: ctx.noise_rng(k, "secureboost/sample") for k in parties if rt.here(k)}
    noise_rngs = {k: ctx.noise_rng(k, "secureboost/noise") for k in others if rt.here(k)}
    for t in range(cfg.trees):
        t1 = time.perf_counter()
        with_partners = bool(others) and t >= cfg.local_trees
        leaf_of = _grow(ctx, cfg, st, keys, rngs, noise_rngs, margin, y, with_partners)
        if rt.here(L):
            margin += leaf_of
        if cfg.subsample < 1.0:  # rows outside the sample: routed through the owners
            single = _one_tree(st.trees, t) if rt.here(L) else None
            out = route_margins(
                rt,
                label_party=L,
                parties=parties,
                depth=cfg.depth,
                trees=single,
                lookups=st.lookups,
                bins=st.bins_train,
                n_rows=ctx.info.n_train,
            )
            if rt.here(L):
                margin += out - leaf_of
        st.tree_s.append(time.perf_counter() - t1)
    return st, time.perf_counter() - t0


def _one_tree(trees: TreeSet, t: int) -> TreeSet:
    """A view of tree ``t`` alone (base 0) for routing."""
    return TreeSet(
        trees.owner, trees.record, trees.left, trees.right, trees.value, [trees.roots[t]]
    )


def _sample_size(n: int, share: float) -> int:
    """Rows in each tree's sample (the same every tree)."""
    return n if share >= 1.0 else max(1, int(round(share * n)))


def _sample(rng: np.random.Generator, n: int, share: float) -> np.ndarray:
    if share >= 1.0:
        return np.arange(n)
    return np.sort(rng.choice(n, size=_sample_size(n, share), replace=False))


def _grow(ctx, cfg, st, keys, rngs, noise_rngs, margin, y, with_partners) -> np.ndarray | None:
    """One tree (SPMD); at L the contribution of each training row in the sample (0 outside)."""
    rt, L, nb = ctx.rt, ctx.info.label_party, cfg.n_bins
    others = [k for k in ctx.data_parties if k != L]
    clock = st.phases_s
    cols = {k: rngs[k].permutation(st.bins_train[k].shape[1]) for k in rngs}
    cols = {k: c[: cfg.columns_used(len(c))] for k, c in cols.items()}  # each party its own
    rows = g = h = nodes = None
    if rt.here(L):
        rows = _sample(rngs[L], len(y), cfg.subsample)
        g, h = grad_hess(cfg, y[rows], margin[rows])
        root = st.trees.new_node()
        st.trees.roots.append(root)
        nodes = [sp.Node(root, np.arange(len(rows)), float(g.sum()), float(h.sum()))]
    cts = {}
    if with_partners:
        payload = None
        if rt.here(L):
            t0 = time.perf_counter()
            off = st.offloads.get(L)
            data = sp.encrypt_gradients(keys[L], g, h, off)
            payload = {"rows": rows.astype(np.int64), "cts": data}
            clock["encrypt"] += time.perf_counter() - t0
        n = ctx.info.n_train
        sampled = Expect("gradients", dtype="iu", shape=(None,), lo=0, hi=n - 1)
        width = next((ph.ct_width(c.pub) for k, c in keys.items() if k != L), None)
        whole = Expect("gradients", kind="bytes", multiple=width)  # whole ciphertexts
        expect = Expect("gradients", kind="dict", fields=(("rows", sampled), ("cts", whole)))
        got = rt.broadcast(payload, src=L, dsts=others, expect=expect)
        for k in others:
            if rt.here(k):
                r = np.asarray(got["rows"], dtype=np.int64)
                if len(got["cts"]) != len(r) * ph.ct_width(keys[k].pub):
                    raise ProtocolError("one ciphertext per sampled row must arrive")
                if k in st.offloads:  # the bytes to the party's workers, read there
                    cts[k] = (r, st.offloads[k].hold(got["cts"]))
                else:
                    cts[k] = (r, ph.from_bytes(keys[k].pub, got["cts"]))
    levels = {k: hs.LevelCells() for k in cts}  # each partner's cells of the level before
    bins_L = st.bins_train[L][rows] if rt.here(L) else None
    leaf_of = np.zeros(ctx.info.n_train) if rt.here(L) else None
    for _level in range(cfg.depth):
        node_of = None
        if rt.here(L):
            node_of = np.full(len(rows), -1, dtype=np.int64)
            for v, node in enumerate(nodes):
                node_of[node.rows] = v
        sums, requests = {}, {}
        if with_partners:
            msg = rt.broadcast(
                None if node_of is None else {"node": node_of, "n": len(nodes)},
                src=L,
                dsts=others,
                expect=_node_rule(cts),
            )
            replies: dict[int, Any] = dict.fromkeys(others)  # the senders, set where they live
            for k in others:
                if rt.here(k):
                    t0 = time.perf_counter()
                    r, c = cts[k]
                    kb = st.bins_train[k][r][:, cols[k]]
                    noise = None
                    if cfg.noise_multiplier is not None:
                        cg, ch = cfg.grad_bounds()
                        s = cfg.noise_multiplier
                        noise = (noise_rngs[k], s * cg, s * ch)
                    node_vec, n_open = _node_vector(msg, len(r)), int(msg["n"])
                    replies[k] = sp.bin_sums(
                        keys[k], c, kb, node_vec, n_open, nb, noise, st.offloads.get(k), levels[k]
                    )
                    clock["bin_sums"] += time.perf_counter() - t0
            got = rt.gather(replies, dst=L, expect=_sums_rule(ctx, cfg, keys, others, nodes, nb))
        if rt.here(L):
            t0 = time.perf_counter()
            sums[L] = sp.own_sums(bins_L[:, cols[L]], g, h, node_of, len(nodes), nb)
            for k in others if with_partners else []:
                F = ctx.info.features_per_party[k]
                sums[k] = sp.open_sums(keys[L], got[k], len(nodes), cfg.columns_used(F), nb)
            clock["open"] += time.perf_counter() - t0
            sd = {}
            if cfg.noise_multiplier is not None:  # the partners' (g, h) noise, per bin sum
                cg, ch = cfg.grad_bounds()
                sd = dict.fromkeys(others, (cfg.noise_multiplier * cg, cfg.noise_multiplier * ch))
            chosen = sp.choose_splits(nodes, sums, cfg.lam, cfg.min_child, sd)
            for k in others:
                req = [(v, s, b) for (p, s, b, v) in (c for c in chosen if c) if p == k]
                requests[k] = np.asarray(req, dtype=np.int64).reshape(-1, 3)
        lefts, records = {}, {}
        if with_partners:
            answers: dict[int, Any] = dict.fromkeys(others)
            for k in others:
                req = rt.send(requests.get(k), src=L, dst=k, expect=_REQUEST)
                if rt.here(k):
                    r = cts[k][0]
                    node_vec = _node_vector(msg, len(r))
                    answers[k] = sp.split_rows(
                        st.lookups[k], st.bins_train[k][r], cols[k], node_vec, req
                    )
            got = rt.gather(answers, dst=L, expect=_ANSWER)
            if rt.here(L):
                for k in others:
                    lefts[k], records[k] = _unpack_answer(got[k], nodes, chosen, k)
        if rt.here(L):
            own = (st.lookups[L], bins_L, cols[L])
            finished = [n for n, c in zip(nodes, chosen, strict=True) if c is None]
            nodes = sp.apply_splits(
                st.trees, nodes, chosen, lefts, records, own, g, h, cfg.lr, cfg.lam
            )
            for node in finished:
                leaf_of[rows[node.rows]] = st.trees.value[node.index]
            clock["split"] += time.perf_counter() - t0
    if rt.here(L):
        for node in nodes:  # the last level's children are leaves
            st.trees.value[node.index] = cfg.lr * leaf_value(node.G, node.H, cfg.lam)
            leaf_of[rows[node.rows]] = st.trees.value[node.index]
    return leaf_of


def _node_vector(msg: Any, n_rows: int) -> np.ndarray:
    v = np.asarray(msg["node"], dtype=np.int64)
    if v.shape != (n_rows,) or (n_rows and not -1 <= v.min() <= v.max() < int(msg["n"])):
        raise ProtocolError("the node of every sampled row must be -1 or an open node")
    return v


# (node, column slot, bin) per split on the partner's columns (split_rows checks the slot)
_REQUEST = Expect("split requests", dtype="iu", shape=(None, 3), lo=0)
_ANSWER = Expect(
    "split answers",
    kind="dict",
    fields=(
        ("records", Expect("split answers", dtype="iu", shape=(None,), lo=0)),
        ("left", Expect("split answers", dtype="u", shape=(None,))),
    ),
)


def _sums_rule(ctx: Any, cfg: Any, keys: dict, others: list[int], nodes: Any, nb: int) -> Any:
    """At the label holder: each partner's bin sums, the ciphertexts ``open_sums`` takes."""
    L = ctx.info.label_party
    if L not in keys or nodes is None:
        return None
    c, rule = keys[L], {}
    for k in others:
        total = len(nodes) * cfg.columns_used(ctx.info.features_per_party[k]) * nb
        size = -(-total // c.capacity) * ph.ct_width(c.pub)
        rule[k] = Expect("bin sums", kind="bytes", min_len=size, max_len=size)
    return rule


def _node_rule(cts: dict[int, Any]) -> Expect:
    """A level's node of each sampled row (-1: in no open node) and the open nodes' count;
    the rows are those a partner received (None at the label holder, which receives none)."""
    rows = len(next(iter(cts.values()))[0]) if cts else None
    node = Expect("nodes", dtype="iu", shape=(rows,), lo=-1, hi=None if rows is None else rows)
    count = Expect("nodes", kind="int", lo=1, hi=None if rows is None else max(rows, 1))
    return Expect("nodes", kind="dict", fields=(("node", node), ("n", count)))


def _unpack_answer(ans: dict, nodes: list, chosen: list, k: int):
    """L: party k's records and left masks, one per node split on k's columns (in order)."""
    mine = [nodes[c[3]] for c in chosen if c and c[0] == k]
    recs = np.asarray(ans["records"], dtype=np.int64)
    bits = np.asarray(ans["left"], dtype=np.uint8)
    if len(recs) != len(mine):
        raise ProtocolError(f"party {k} must answer {len(mine)} splits, got {len(recs)}")
    lefts, pos = [], 0
    for node in mine:
        width = -(-len(node.rows) // 8)
        lefts.append(np.unpackbits(bits[pos : pos + width])[: len(node.rows)].astype(bool))
        pos += width
    if pos != len(bits):
        raise ProtocolError(f"party {k}'s left masks must cover its nodes' rows exactly")
    return lefts, recs.tolist()
