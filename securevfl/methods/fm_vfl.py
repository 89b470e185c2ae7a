"""FM-VFL: the functional mechanism on vertically partitioned data (Xu, Yuan & Wu, Algorithm 1).

The objective (linear regression, Eq. 2, or the order-2 Taylor logistic loss, Eq. 4) is a
quadratic f(w) = λ0 + λᵀw + Σ_{a<=b} λ_ab w_a w_b whose coefficients are sums over rows. It is
dissected (Eq. 5) into blocks (``securevfl.privacy.functional``): each party computes and
perturbs its single-party block itself; every cross-party block M_aᵀM_b (the label party's
M_0 = [v | X_0] with v = 1/2 - y or y, else M_k = X_k) is ONE secure matrix product under Shamir
sharing among the K data parties and the server (m = K + 1 >= 3 MPyC parties, asked of the
runtime: ``rt.secure_products``), with party a's Laplace noise shared into the sum before it is
opened to the server only; so unlike the paper, where the parties see the exact cross products
before noising them, nobody sees an exact cross-party coefficient. The server assembles the
noisy objective and minimises it.

Inputs follow the paper's range: each party multiplies its block back by sqrt(T) (T the public
row-norm bound of the partition) so every feature lies in [-1, 1], labels in {0, 1} / [-1, 1].
The paper's Lemma 1 bound B_k = d_k is the L1 norm of the box's corner; real rows sit far inside
it, so (issue 25) each party scales its rows down to L1 norm <= 2 sqrt(d_k) (``--l1-bound
auto``; a public row-wise map, applied to test and predicted rows alike) and Lemma 1 is used
with those B_k: on breast Δ_f 271 -> 84.5. ``--l1-bound box`` is the paper's (and the seed's).
Option ``intercept``: a constant-1 column at the label party (in d). Solver: ``fm_objective``.

Δ_f grows as d², so the encoding matters (adult: ``--encoding compact``, d = 42, not 109). The
record reports d, Δ_f, the global ε and every party's ε^(k); ``extra.mpc`` has each MPyC
party's secure-phase seconds and peak memory (VmHWM of its own process), ``extra.phases_s`` /
``extra.phases_bytes`` the secure phase's parts (slowest party's seconds, payload bytes).

Mechanism (issue 25): ``--mechanism gaussian`` (the default) puts N(0, σ²) on every released
coefficient, each party's row block scaled to L2 norm <= ``--l2-bound`` (1), σ sized for the
whole vector's L2 sensitivity and the released means together (``securevfl.privacy.fm_gaussian``
derives it); ``--mechanism laplace`` is the paper's Lemma 1 with the L1 bounds above.

Defaults (``securevfl run fm-vfl --dataset D --epsilon E``; a value the user gives wins): each
party centres its numeric columns (``--center``; off: ``--no-center``) on means released under
``--centre-share`` 0.25 of ε (Laplace: 0.2; split over the K parties; the seed: 0.1), the
compact encoding where a dataset has one, ``ridge auto`` (Gaussian 1; Laplace 2 below 10,000
training rows, else 1) and, with Laplace, ``--l1-bound auto``. Why (issue 25, docs/methods.md):
Lemma 1's noise drowned every coefficient at small ε, and the means' noise shifts every score by
an offset the ridged intercept cannot absorb (breast ε = 4, Laplace: AUC 0.97, accuracy 0.72).

Residual mode (``--offset gbdt``, ``securevfl.methods.fm_offset``): the label holder keeps
boosted trees on its own columns, the objective covers the partners' columns with the trees'
margins as per-row offsets; party-row over the partners' rows (the label holder's rows are
outside the guarantee there). ``--offset dp-gbdt`` (``securevfl.methods.fm_dp_offset``): the
trees are fitted under DP on ``--offset-share`` of the budget and the run is in the sample unit.

Precision: inputs are rounded to 2**-f (``frac_bits``: 16 unless the noise bound needs fewer),
products are exact, so an opened coefficient is within n * 2**-f of the real sum. Scale: the
default ``rns`` products size their modulus from n; ``vectorized``/``naive`` stop at 1e5 rows.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Any

import numpy as np

from securevfl.context import Option, RunContext, RunSpec, fingerprint, parse_bool
from securevfl.engine import EngineRows
from securevfl.errors import ConfigError
from securevfl.methods.base import Method, register_method
from securevfl.methods.fm_dp_offset import (
    OFFSET_SHARE_OPTION,
    OFFSET_SPLITS_OPTION,
    OFFSET_TREES_OPTION,
)
from securevfl.methods.fm_noise import SCORING_OUTSIDE, fm_privacy, noise_plan
from securevfl.methods.fm_offset import (
    OFFSET_OPTION,
    check_offset,
    offset_head,
    offset_noise_plan,
    offset_privacy,
    own_offsets,
    residual_vector,
)
from securevfl.methods.fm_options import (
    CENTRE_SHARE_OPTION,
    L2_BOUND_OPTION,
    MECHANISM_OPTION,
    RIDGE_OPTION,
    VFL_L1_BOUND_OPTION,
    clip_l1,
    fm_common_defaults,
    resolve_ridge,
    resolve_share,
)
from securevfl.privacy.fm_gaussian import (
    clip_l2,
    draw,
    ridge_scale,
)
from securevfl.privacy.fm_objective import (
    NOISE_TAIL,
    assemble_objective,
    factors,
    fm_task,
    label_vector,
    laplace_upper,
    parse_party_epsilons,
    single_coefficients,
    solve_noisy_quadratic,
)
from securevfl.privacy.functional import (
    BUDGETS,
)
from securevfl.results import FitResult, ModelPart
from securevfl.runtime.engine_stream import EngineInput, row_order
from securevfl.runtime.expect import Expect
from securevfl.runtime.secure_products import ProductRequest

__all__ = [
    "FMVFL",
    "RIDGE_OPTION",
    "assemble_objective",
    "fm_common_defaults",
    "fm_task",
    "resolve_ridge",
    "solve_noisy_quadratic",
]
MPC_IMPLS = ("rns", "vectorized", "naive")
LEGACY_MAX_ROWS = 100_000  # MPyC's own arithmetic runs in a 56-bit field sized for this many rows


def _box_rows(X: np.ndarray, root: float, bound: tuple[str, float], ones: bool) -> np.ndarray:
    """Rows back in the paper's range [-1, 1] (x ``root``), each scaled to its norm bound
    (``("l1", B)`` or ``("l2", R)``), the constant column first where ``ones``: a public
    row-wise map, so it runs block by block on a party's engine as well."""
    X = np.clip(X * root, -1, 1)
    X = clip_l2(X, bound[1]) if bound[0] == "l2" else clip_l1(X, bound[1])
    return np.hstack([np.ones((X.shape[0], 1)), X]) if ones else X


def _box(
    ctx: RunContext,
    k: int,
    intercept: bool,
    bound: tuple[str, float],
    test: bool = False,
    offset: bool = False,
) -> Any:
    """Party k's block as :func:`_box_rows` maps it, and the constant column at party 0
    (``offset``: the label holder's columns stay in its own trees, only the constant is here).
    A table on the party's engine stays there (the map applied to its blocks when read)."""
    rows = ctx.views[k].X_test if test else ctx.views[k].X_train
    if k == 0 and offset:
        return np.ones((len(rows), 1 if intercept else 0))
    ones = k == 0 and intercept
    fn = functools.partial(
        _box_rows, root=math.sqrt(ctx.info.row_norm_bound_sq), bound=tuple(bound), ones=ones
    )
    if isinstance(rows, EngineRows):
        return rows.map_rows(fn, rows.shape[1] + ones)
    return fn(rows)


@register_method
class FMVFL(Method):
    name = "fm-vfl"
    summary = "functional mechanism, cross-party coefficients by Shamir products in MPyC (Xu+ 2021)"
    family = "dp+mpc"
    privacy_unit = "sample"
    models = ("glm",)
    requires_epsilon = True
    uses_server = True
    options = {
        "mpc_impl": Option(
            str,
            "rns",
            "cross-party products: Shamir over residue fields with BLAS products (rns, any n), "
            "MPyC's secure matrix product (vectorized) or the seed's per-coefficient in_prod "
            "(naive); the last two for n <= 100,000",
            choices=MPC_IMPLS,
        ),
        "budget": Option(
            str,
            "top-down",
            "the server picks epsilon (top-down) or each party picks its own (bottom-up)",
            choices=BUDGETS,
        ),
        "party_epsilons": Option(
            str,
            "",
            "bottom-up: comma-separated epsilon^(k) each data party offers (instead of "
            "--epsilon; without it, equal offers scaled so the global epsilon is --epsilon)",
            when=("budget", ("bottom-up",)),
        ),
        "intercept": Option(
            parse_bool,
            True,
            "a constant-1 feature at the label party (counted in d)",
        ),
        "ridge": RIDGE_OPTION,
        "l1_bound": VFL_L1_BOUND_OPTION,
        "centre_share": CENTRE_SHARE_OPTION,
        "mechanism": MECHANISM_OPTION,
        "l2_bound": L2_BOUND_OPTION,
        "offset": OFFSET_OPTION,
        "offset_share": OFFSET_SHARE_OPTION,
        "offset_splits": OFFSET_SPLITS_OPTION,
        "offset_trees": OFFSET_TREES_OPTION,
    }

    @classmethod
    def common_defaults(cls, given: dict[str, Any]) -> dict[str, Any]:
        """Centred columns and the compact encoding where the dataset has one."""
        return fm_common_defaults(given)

    def composes_centring(self, spec: RunSpec) -> bool:
        """The Gaussian composes the means' releases in its own PLD ledger (tight)."""
        return spec.option("mechanism", self) == "gaussian"

    def centre_share(self, spec: RunSpec) -> float:
        """fm-vfl's own share for the released means (``--centre-share``)."""
        return resolve_share(spec.option("centre_share", self), spec.option("mechanism", self))

    def validate(self, spec: RunSpec) -> None:
        super().validate(spec)
        check_offset(spec, self)
        offers = parse_party_epsilons(spec.option("party_epsilons", self), spec.parties)
        gaussian = spec.option("mechanism", self) == "gaussian"
        if gaussian and spec.option("budget", self) == "bottom-up":
            raise ConfigError(
                "budget bottom-up needs --mechanism laplace (each party's own Laplace offer; "
                "the Gaussian noises the whole objective at one sigma), got --mechanism gaussian"
            )
        if offers is not None and spec.epsilon is not None:
            raise ConfigError(
                "epsilon must not be given with party_epsilons (the parties' offers set the "
                f"budget), got --epsilon {spec.epsilon}"
            )

    def epsilon_required(self, spec: RunSpec) -> bool:
        return not str(spec.options.get("party_epsilons", "")).strip()

    def fit(self, ctx: RunContext) -> FitResult:
        rt, info, spec = ctx.rt, ctx.info, ctx.spec
        task = fm_task(info.task)
        K, server = info.data_parties, info.server
        intercept = bool(spec.option("intercept", self))
        offset = spec.option("offset", self) != "none"
        if offset and task != "logistic":
            raise ConfigError(
                f"--offset {spec.option('offset', self)} needs a binary dataset, got task "
                f"{info.task!r}"
            )
        if offset and any(isinstance(v.X_train, EngineRows) for v in ctx.views.values()):
            raise ConfigError(
                f"--offset {spec.option('offset', self)} fits trees on the label holder's rows "
                "in its process: run it with --engine numpy (a table on the engine is not read "
                "whole)"
            )
        t0 = time.perf_counter()
        dims = [info.features_per_party[k] + (1 if k == 0 and intercept else 0) for k in range(K)]
        if offset:  # the label holder's columns stay in its trees (fm_offset)
            dims[0] = 1 if intercept else 0
            noise = offset_noise_plan(self, spec, K, intercept, info.features_per_party[0])
        else:
            noise = noise_plan(self, spec, task, dims, info.features_per_party, intercept)
        scales, bounds, gauss = noise["scales"], noise["bounds"], noise["gaussian"]
        X = {k: _box(ctx, k, intercept, bounds[k], offset=offset) for k in ctx.views if k < K}
        margins = rt.local(0, own_offsets, ctx, noise) if offset else None
        v = None
        if rt.here(0):
            y = ctx.views[0].y_train
            v = residual_vector(margins[0], y) if offset else label_vector(task, y)
        rngs = {k: ctx.noise_rng(k, "fm") for k in rt.local_parties}
        # each party's noise on its own block, drawn first (the draw order of every run)
        own_noise = {
            k: rt.local(k, _own_noise, task, dims[k], k == 0, scales[(k, k)], rngs.get(k), gauss)
            for k in range(K)
        }
        # cross-party blocks: one secure product each, party a's noise in, opened at the server;
        # the parties go into it first (their own blocks come after: a table on the engine
        # gives them from the same pass over its rows as the product's input)
        impl = spec.option("mpc_impl", self)
        request, mats, noises = _cross_request(ctx, task, impl, dims, scales, X, v, rngs, gauss)
        _same_row_order(rt, K, X)
        t_mpc = time.perf_counter()
        res = rt.secure_products(request, mats, noises, stats_at=info.label_party)
        mpc_s = time.perf_counter() - t_mpc
        # single-party blocks: computed and perturbed by their owner, sent to the server
        singles = {
            k: rt.send(
                rt.local(
                    k,
                    _single,
                    task,
                    X.get(k),
                    v if k == 0 else None,
                    own_noise.get(k),
                    ctx.engine(k),
                    mats.get(k),
                ),
                src=k,
                dst=server,
                expect=_single_expect(dims[k]),
            )
            for k in range(K)
        }

        def assemble_and_solve():
            cross = {(p[0], p[1]): res.blocks[j] for j, p in enumerate(request.pairs)}
            lam, U = assemble_objective(task, dims, singles, cross)
            ridge = resolve_ridge(spec.option("ridge", self), info.n_train, noise["mechanism"])
            top = ridge_scale(gauss, max(scales.values()))
            w = solve_noisy_quadratic(lam, U, scale=top, ridge=ridge)
            offs = np.cumsum([0, *dims])
            return [w[offs[k] : offs[k + 1]] for k in range(K)]

        blocks_w = rt.local(server, assemble_and_solve)
        # release: the (differentially private) model goes to every data party
        w_k = {
            k: rt.send(
                blocks_w[k] if rt.here(server) else None,
                src=server,
                dst=k,
                expect=Expect("model release", shape=(dims[k],)),
            )
            for k in range(K)
        }
        train_s = time.perf_counter() - t0
        own = None if margins is None else (margins[1], margins[3])
        scores = _score(ctx, task, intercept, bounds, w_k, offset, own)
        if offset:
            privacy = offset_privacy(spec, noise, K, self, [SCORING_OUTSIDE])
        else:
            privacy = fm_privacy(spec, noise, dims, self)
        fps = {k: fingerprint(w_k[k]) for k in range(K) if rt.here(k)}
        extra = {
            "d": int(sum(dims)),
            "mpc_s": round(mpc_s, 4),
            "frac_bits": request.frac_bits,
            "mpc_impl": request.impl,
            "mpc": res.stats(),
            "phases_s": res.slowest_phases(),
            "phases_bytes": res.phases_bytes,
        }
        transform = {"input_scale": math.sqrt(info.row_norm_bound_sq), "input_clip": 1.0}
        model = {
            k: ModelPart(
                "linear",
                {"w": np.asarray(w_k[k], dtype=np.float64)},
                {**transform, f"input_{bounds[k][0]}": bounds[k][1]},
            )
            for k in range(K)
            if rt.here(k)
        }
        if 0 in model:  # the label holder: the link, and the constant column's weight w_0[0]
            model[0].arrays["bias"] = np.zeros(1)
            model[0].meta.update(head=True, link="sigmoid" if task == "logistic" else "identity")
            model[0].meta["intercept"] = intercept
        if offset:
            extra["offset"] = spec.option("offset", self)
            if 0 in model:  # its trees and the step gain (fm_offset.offset_head)
                offset_head(model[0], own[1], margins[2], info.features_per_party[0], K)
        return FitResult(
            scores, train_s, privacy=privacy, fingerprints=fps, extra=extra, model=model
        )


def _single_expect(d: int) -> Expect:
    """What the server accepts as a party's own block of d coefficients (:func:`_single`)."""
    return Expect(
        "own block",
        kind="dict",
        fields=(
            ("lam0", Expect("own block", kind="float")),
            ("lam", Expect("own block", shape=(d,), optional=True)),
            ("U", Expect("own block", shape=(d, d))),
        ),
    )


def _own_noise(
    task: str, d: int, labelled: bool, s: float, rng: Any, gauss: bool = False
) -> dict[str, Any]:
    """The noise on a party's own block (``labelled``: the label party's, with λ): Laplace(s)
    or N(0, s²) on every released coefficient, drawn in this order (U, λ, λ0)."""
    U = np.triu(draw(rng, True, s, (d, d))) if gauss else laplace_upper(rng, d, s)
    lam = draw(rng, gauss, s, (d,)) if labelled else None
    lam0 = float(draw(rng, gauss, s, None)) if labelled and task == "linear" else 0.0
    return {"U": U, "lam": lam, "lam0": lam0}


def _single(
    task: str,
    X: Any,
    v: np.ndarray | None,
    noise: dict[str, Any],
    engine: Any = None,
    streamed: Any = None,
) -> dict:
    """A party's own block (v: the label column, at the label party) plus its ``noise``
    (:func:`_own_noise`); its products on ``engine``, or the sums of its ``streamed`` product
    input where that read the table from the engine (:class:`EngineInput`)."""
    sums = streamed.sums() if isinstance(streamed, EngineInput) else None
    lam0, lam, U = single_coefficients(task, X, v, engine, sums=sums)
    U = U + noise["U"]
    if lam is not None:
        lam = lam + noise["lam"]
        lam0 = lam0 + noise["lam0"]
    return {"lam0": lam0, "lam": lam, "U": U}


def _cross_request(ctx: RunContext, task: str, impl: str, dims, scales, X, v, rngs, gauss=False):
    """The secure-product job for every cross block (a < b, noised by a) and this process's
    inputs: M_0 = [v | X_0], M_k = X_k; noise in the MPC's units (λ = factor * R)."""
    rt, info, spec = ctx.rt, ctx.info, ctx.spec
    K = info.data_parties
    alpha, c = factors(task)
    pairs = [(a, b) for a in range(K) for b in range(a + 1, K)]
    bound = NOISE_TAIL * max(scales[p] for p in pairs) / min(abs(alpha), 2 * c)
    from protocols.shamir_products import choose_frac_bits  # noqa: PLC0415

    if impl != "rns" and info.n_train > LEGACY_MAX_ROWS:
        raise ConfigError(
            f"fm-vfl's mpc_impl {impl!r} is sized for n <= {LEGACY_MAX_ROWS} rows (use "
            f"mpc_impl rns), got n_train = {info.n_train}"
        )
    frac_bits = choose_frac_bits(LEGACY_MAX_ROWS, bound)  # precision as before, for any n
    mats = {k: _product_input(k, X[k], v, frac_bits, spec.timeout) for k in X}
    noises = {}
    for j, (a, b) in enumerate(pairs):
        if rt.here(a):
            div = np.full((dims[a] + (1 if a == 0 else 0), 1), 2 * c)
            if a == 0:
                div[0] = alpha
            noises[j] = draw(rngs[a], gauss, scales[(a, b)], (len(div), dims[b])) / div
    request = ProductRequest(
        pairs=tuple((a, b, a) for a, b in pairs),
        shapes={k: (info.n_train, dims[k] + (1 if k == 0 else 0)) for k in range(K)},
        receiver=info.server,
        frac_bits=frac_bits,
        noise_bound=bound,
        impl=impl,
        timeout=spec.timeout,
    )
    return request, mats, noises


def _product_input(k: int, X: Any, v: np.ndarray | None, frac_bits: int, timeout: float) -> Any:
    """Party k's product input M_k (M_0 = [v | X_0]): an array, or streamed from its engine
    block by block in table order (:mod:`securevfl.runtime.engine_stream`)."""
    if isinstance(X, EngineRows):
        return EngineInput(X, frac_bits, timeout, front=v if k == 0 else None)
    return np.hstack([v[:, None], X]) if k == 0 else X


def _same_row_order(rt: Any, K: int, X: dict[int, Any]) -> None:
    """Every data party must give the product its rows in the same order (a sum over rows is
    the same in any order the parties share, garbage in two): the tags go to every party on the
    control plane, and every party refuses a mix in the same line."""
    orders = {k: rt.control(row_order(X[k]) if rt.here(k) else None, src=k) for k in range(K)}
    if len(set(orders.values())) > 1:
        raise ConfigError(
            "fm-vfl's data parties must all keep their tables on their engines or all in their "
            f"processes (the product's row order), got {orders}"
        )


def _score(
    ctx: RunContext,
    task: str,
    intercept: bool,
    bounds: list,
    w_k: dict,
    offset: bool = False,
    own: tuple[np.ndarray, float] | None = None,
) -> np.ndarray | None:
    """Test scoring: each party sends X_k,test w_k to the label party (phase ``eval``); in
    residual mode the label holder's ``own`` = (its trees' test margins, the step gain):
    margin + gain * the partners' sum (``fm_offset.step_gain``)."""
    rt, K = ctx.rt, ctx.info.data_parties

    def part(k: int) -> np.ndarray:
        box = _box(ctx, k, intercept, bounds[k], test=True, offset=offset)
        return ctx.engine(k).matvec(box, w_k[k])

    with rt.meter.in_phase("eval"):
        # every party lists every sender (None where it does not live): SPMD lockstep
        partial = {k: rt.local(k, part, k) for k in range(K)}
        rows = len(ctx.views[0].X_test) if rt.here(0) else None  # checked where it arrives
        got = rt.gather(partial, dst=0, expect=Expect("scores", shape=(rows,)))
    if not rt.here(0):
        return None
    if own is None:
        return _link(task, sum(got.values()))
    # the saved model's arithmetic (predict: own, then the partners by index, then the trees)
    z = sum(own[1] * got[k] for k in sorted(got)) + own[0]
    return _link(task, z)


def _link(task: str, z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z)) if task == "logistic" else z
