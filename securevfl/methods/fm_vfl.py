"""FM-VFL: the functional mechanism on vertically partitioned data (Xu, Yuan & Wu, Algorithm 1).

The objective (linear regression, Eq. 2, or the order-2 Taylor logistic loss, Eq. 4) is a
quadratic f(w) = λ0 + λᵀw + Σ_{a<=b} λ_ab w_a w_b whose coefficients are sums over rows. It is
dissected (Eq. 5) into blocks (``securevfl.privacy.functional``): each party computes and
perturbs its single-party block itself; every cross-party block M_aᵀM_b (the label party's
M_0 = [v | X_0] with v = 1/2 - y or y, else M_k = X_k) is ONE secure matrix product under Shamir
sharing among the K data parties and the server (MPyC, m = K + 1 >= 3), with party a's Laplace
noise secret-shared into the sum before it is opened to the server only; so unlike the paper,
where the parties see the exact cross products before noising them, nobody sees an exact
cross-party coefficient. The server assembles the noisy objective and minimises it.

Inputs follow the paper's range: each party multiplies its block back by sqrt(T) (T the public
row-norm bound of the partition) so every feature lies in [-1, 1], labels in {0, 1} / [-1, 1];
Lemma 1 then holds with B_k = d_k. Option ``intercept`` adds a constant-1 column at the label
party (counted in d). Solving: see :func:`solve_noisy_quadratic`.

Δ_f grows as d², so the encoding matters: on adult, ``--encoding compact`` (the paper's 41
columns, d = 42 with the intercept) against the default one-hot (108 columns, d = 109). The
record reports d, Δ_f, the global ε and every party's ε^(k); ``extra.mpc`` has each MPyC
party's secure-phase seconds and peak memory (VmHWM of its own process).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from securevfl.context import Option, RunContext, RunSpec, fingerprint, parse_bool
from securevfl.errors import ConfigError, ProtocolError, check_positive
from securevfl.methods.base import Method, register_method
from securevfl.privacy.functional import (
    BUDGETS,
    block_sensitivities,
    bottom_up_scales,
    fm_ledger,
    global_sensitivity,
    party_sensitivity,
    target_bottom_up_scales,
    top_down_scales,
)
from securevfl.results import FitResult

NOISE_TAIL = 45.0  # |Lap(b)| > 45 b has probability e^-45: the field is sized for 45 b


def fm_task(task: str) -> str:
    """'binary' -> logistic (Eq. 4), 'regression' -> linear (Eq. 2)."""
    if task == "binary":
        return "logistic"
    if task == "regression":
        return "linear"
    raise ConfigError(f"fm-vfl needs a binary or regression dataset, got task {task!r}")


def label_vector(task: str, y: np.ndarray) -> np.ndarray:
    """The label column of M_0: 1/2 - y (logistic: f1'(0) - y), y (linear)."""
    y = np.asarray(y, dtype=np.float64)
    return 0.5 - y if task == "logistic" else y


def factors(task: str) -> tuple[float, float]:
    """(first-order factor α, quadratic factor c): λ_a = α Σ v x_a, λ_aa = c Σ x_a², λ_ab = 2c Σ."""
    return (1.0, 0.125) if task == "logistic" else (-2.0, 1.0)


def single_coefficients(task: str, X: np.ndarray, v: np.ndarray | None):
    """(λ0, λ_first or None, U upper-triangular monomial coefficients) of one party's block."""
    alpha, c = factors(task)
    G = X.T @ X
    U = np.triu(2 * c * G, 1) + np.diag(c * np.diag(G))
    if v is None:
        return 0.0, None, U
    lam0 = float(v @ v) if task == "linear" else 0.0
    return lam0, alpha * (X.T @ v), U


def laplace_upper(rng: np.random.Generator, d: int, scale: float) -> np.ndarray:
    """Independent Laplace(scale) on each distinct monomial w_a w_b, a <= b (upper triangle)."""
    return np.triu(rng.laplace(0.0, scale, size=(d, d)))


def solve_noisy_quadratic(
    lam: np.ndarray, U: np.ndarray, *, scale: float, ridge: float
) -> np.ndarray:
    """argmin λᵀw + wᵀSw for S = (U + Uᵀ)/2 (the noisy monomial coefficients, symmetrised).

    A noisy S can be indefinite and the objective unbounded below. As in Zhang et al. 2012
    (Sec. 5) we (1) regularise, S + ρI with ρ = ridge * sqrt(2d) * scale: sqrt(2d) * scale is
    the spectral norm of the symmetrised noise (Wigner: 2 σ sqrt(d) with off-diagonal σ =
    scale/sqrt(2)), a public number, so no budget is spent; and (2) trim the spectrum: the
    eigen-directions whose eigenvalue is still <= a tiny positive floor are dropped (w has no
    component there), and the objective is minimised on the remaining positive definite part.
    """
    S = (U + U.T) / 2.0
    d = S.shape[0]
    S = S + ridge * math.sqrt(2.0 * d) * scale * np.eye(d)
    vals, vecs = np.linalg.eigh(S)
    floor = 1e-9 * max(1.0, float(np.abs(vals).max()))
    keep = vals > floor
    g = vecs[:, keep].T @ lam
    return vecs[:, keep] @ (-g / (2.0 * vals[keep]))


def assemble_objective(
    task: str,
    dims: list[int],
    singles: dict[int, dict[str, Any]],
    cross: dict[tuple[int, int], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """The server's noisy objective (λ, U) from the single-party blocks and the opened cross
    products R_ab = M_aᵀM_b + noise (row 0 of R_0b is v·X_b: the first-order terms of party b)."""
    alpha, c = factors(task)
    offs = np.cumsum([0, *dims])
    d = int(offs[-1])
    lam, U = np.zeros(d), np.zeros((d, d))
    for k in range(len(dims)):
        sl = slice(offs[k], offs[k + 1])
        U[sl, sl] = singles[k]["U"]
        if k == 0:
            lam[sl] = singles[0]["lam"]
    for (a, b), R in cross.items():
        sa, sb = slice(offs[a], offs[a + 1]), slice(offs[b], offs[b + 1])
        if a == 0:
            lam[sb] = alpha * R[0]
            R = R[1:]
        U[sa, sb] = 2 * c * R
    return lam, U


def parse_party_epsilons(text: str, K: int) -> list[float] | None:
    """``"1,0.5"`` -> one ε^(k) per data party; empty: None."""
    if not str(text).strip():
        return None
    try:
        vals = [float(t) for t in str(text).split(",")]
    except ValueError:
        raise ConfigError(f"party_epsilons must be comma-separated numbers, got {text!r}") from None
    if len(vals) != K:
        raise ConfigError(f"party_epsilons must give {K} values (one per data party), got {text!r}")
    return [check_positive("party_epsilons", v) for v in vals]


def _box(ctx: RunContext, k: int, intercept: bool, test: bool = False) -> np.ndarray:
    """Party k's block back in the paper's range [-1, 1] (+ the constant column at party 0)."""
    v = ctx.views[k]
    X = np.clip((v.X_test if test else v.X_train) * math.sqrt(ctx.info.row_norm_bound_sq), -1, 1)
    if k == 0 and intercept:
        X = np.hstack([np.ones((X.shape[0], 1)), X])
    return X


@register_method
class FMVFL(Method):
    name = "fm-vfl"
    summary = "functional mechanism, cross-party coefficients by Shamir products in MPyC (Xu+ 2021)"
    family = "dp+mpc"
    models = ("glm",)
    requires_epsilon = True
    uses_server = True
    options = {
        "mpc_impl": Option(
            str,
            "vectorized",
            "cross-party products: one secure matrix product "
            "per block, or the seed's per-coefficient in_prod",
            choices=("vectorized", "naive"),
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
        "ridge": Option(
            float, 1.0, "regularisation rho = ridge * sqrt(2d) * Laplace scale", ge=0, le=1e6
        ),
    }

    def validate(self, spec: RunSpec) -> None:
        super().validate(spec)
        offers = parse_party_epsilons(spec.option("party_epsilons", self), spec.parties)
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
        t0 = time.perf_counter()
        dims = [info.features_per_party[k] + (1 if k == 0 and intercept else 0) for k in range(K)]
        sens = block_sensitivities(task, dims)
        offers = parse_party_epsilons(spec.option("party_epsilons", self), K)
        if spec.option("budget", self) == "top-down":
            scales = top_down_scales(sens, spec.epsilon)
        elif offers is None:
            scales = target_bottom_up_scales(sens, spec.epsilon)
        else:
            scales = bottom_up_scales(sens, offers)
        alpha, c = factors(task)
        X = {k: _box(ctx, k, intercept) for k in ctx.views if k < K}
        v = label_vector(task, ctx.views[0].y_train) if rt.here(0) else None
        rngs = {k: ctx.noise_rng(k, "fm") for k in rt.local_parties}

        # single-party blocks: computed and perturbed by their owner, sent to the server
        singles: dict[int, Any] = {}
        for k in range(K):

            def single(k=k):
                lam0, lam, U = single_coefficients(task, X[k], v if k == 0 else None)
                s = scales[(k, k)]
                U = U + laplace_upper(rngs[k], dims[k], s)
                if lam is not None:
                    lam = lam + rngs[k].laplace(0.0, s, size=lam.shape)
                    lam0 = lam0 + (rngs[k].laplace(0.0, s) if task == "linear" else 0.0)
                return {"lam0": lam0, "lam": lam, "U": U}

            singles[k] = rt.send(rt.local(k, single), src=k, dst=server)

        # cross-party blocks: one secure product each, party a's noise shared in, opened at server
        pairs = [(a, b) for a in range(K) for b in range(a + 1, K)]
        # noise in the MPC's units: λ = factor * R, so R-noise = Lap(scale) / factor per row
        bound = NOISE_TAIL * max(scales[p] for p in pairs) / min(abs(alpha), 2 * c)
        from protocols.shamir_products import MAX_ROWS, choose_frac_bits  # noqa: PLC0415

        if info.n_train > MAX_ROWS:
            raise ConfigError(
                f"fm-vfl's fixed-point field is sized for n <= {MAX_ROWS} rows, "
                f"got n_train = {info.n_train}"
            )
        frac = choose_frac_bits(MAX_ROWS, bound)
        mats, noises = {}, {}
        for k in X:
            mats[k] = np.hstack([v[:, None], X[k]]) if k == 0 else X[k]
        for j, (a, b) in enumerate(pairs):
            if rt.here(a):
                rows = mats[a].shape[1]
                div = np.full((rows, 1), 2 * c)
                if a == 0:
                    div[0] = alpha
                noises[j] = rngs[a].laplace(0.0, scales[(a, b)], size=(rows, dims[b])) / div
        t_mpc = time.perf_counter()
        opened, mpc_stats = _secure_cross(
            ctx, pairs, dims, mats, noises, frac, bound, spec.option("mpc_impl", self)
        )
        mpc_s = time.perf_counter() - t_mpc

        def assemble_and_solve():
            cross = {p: opened[j] for j, p in enumerate(pairs)}
            lam, U = assemble_objective(task, dims, singles, cross)
            w = solve_noisy_quadratic(
                lam, U, scale=max(scales.values()), ridge=float(spec.option("ridge", self))
            )
            offs = np.cumsum([0, *dims])
            return [w[offs[k] : offs[k + 1]] for k in range(K)]

        blocks_w = rt.local(server, assemble_and_solve)
        # release: the (differentially private) model goes to every data party
        w_k = {}
        for k in range(K):
            w_k[k] = rt.send(blocks_w[k] if rt.here(server) else None, src=server, dst=k)
        train_s = time.perf_counter() - t0
        with rt.meter.in_phase("predict"):
            # every party lists every sender (None where it does not live): SPMD lockstep
            partial = {
                k: rt.local(k, lambda k=k: _box(ctx, k, intercept, test=True) @ w_k[k])
                for k in range(K)
            }
            got = rt.gather(partial, dst=0)
        scores = None
        if rt.here(0):
            z = sum(got.values())
            scores = 1.0 / (1.0 + np.exp(-z)) if task == "logistic" else z
        delta_f = global_sensitivity(sens)
        privacy = fm_ledger(sens, scales).report(
            0.0,
            target_epsilon=spec.epsilon,
            outside_guarantee=[
                "test scoring: each party sends X_k,test w_k in the clear (test rows; the model "
                "w is post-processing of the noisy objective, so training rows stay covered)"
            ],
            per_party_extra={k: {"sensitivity": party_sensitivity(sens, k)} for k in range(K)},
            extra={
                "delta_f": delta_f,
                "budget": spec.option("budget", self),
                "d": int(sum(dims)),
                "blocks": {
                    f"{a},{b}": {"sensitivity": sens[(a, b)], "scale": scales[(a, b)]}
                    for (a, b) in sens
                },
            },
        )
        fps = {k: fingerprint(w_k[k]) for k in range(K) if rt.here(k)}
        extra = {
            "d": int(sum(dims)),
            "mpc_s": round(mpc_s, 4),
            "frac_bits": frac,
            "mpc_impl": spec.option("mpc_impl", self),
            "mpc": mpc_stats,
        }
        return FitResult(scores, train_s, privacy=privacy, fingerprints=fps, extra=extra)


def _secure_cross(ctx: RunContext, pairs, dims, mats, noises, frac: int, bound: float, impl: str):
    """Run the cross-party products; returns ({j: opened int block} at the server, stats)."""
    from protocols import shamir_products as sp  # noqa: PLC0415

    rt, info = ctx.rt, ctx.info
    K, server = info.data_parties, info.server
    plan = [sp.Pair(a, b, a) for a, b in pairs]
    enc = {k: sp.encode_fixed(M, frac) for k, M in mats.items()}
    mpc = getattr(rt, "mpc", None)
    try:
        if mpc is None:  # in-process runtime: spawn K + 1 real MPyC party processes
            opened, st = sp.run_block_products(
                enc,
                noises,
                plan,
                n_parties=K + 1,
                receiver=server,
                frac_bits=frac,
                noise_bound=bound,
                impl=impl,
                timeout=ctx.spec.timeout,
            )
            with rt.meter.in_phase("mpc"):
                for src, row in st.bytes_sent.items():
                    for dst, nb in row.items():
                        rt.meter.message(src=src, dst=dst, nbytes=nb)
            stats = {"secure_s": st.secure_s, "wall_s": st.wall_s, "peak_rss_mb": st.peak_rss_mb}
        else:  # networked runtime: the parties already run MPyC; use it directly
            me = rt.index
            before = {p.pid: p.protocol.nbytes_sent for p in mpc.parties if p.pid != me}
            # public shapes: M_0 = [v | X_0] has one column more than party 0's block
            shapes = {k: (info.n_train, dims[k] + (1 if k == 0 else 0)) for k in range(K)}
            enc_noise = {j: sp.encode_noise(N, frac, bound) for j, N in noises.items()}
            t = time.perf_counter()
            res = rt._run(
                sp.block_products(
                    mpc,
                    me=me,
                    shapes=shapes,
                    pairs=plan,
                    matrix=enc.get(me),
                    noises=enc_noise,
                    receiver=server,
                    impl=impl,
                ),
                "the secure products",
            )
            opened = res
            with rt.meter.in_phase("mpc"):
                for p in mpc.parties:
                    if p.pid != me:
                        rt.meter.message(
                            src=me, dst=p.pid, nbytes=p.protocol.nbytes_sent - before[p.pid]
                        )
            from protocols.mpyc_party import peak_rss_kb  # noqa: PLC0415

            peak = peak_rss_kb() / 1024.0  # VmHWM of this party process
            mine = {"secure_s": time.perf_counter() - t, "peak_rss_mb": peak}
            got = rt.collect(mine, dst=info.label_party) or {}
            stats = {key: {k: s[key] for k, s in got.items()} for key in mine}
    except sp.ShamirProtocolError as exc:
        raise ProtocolError(f"fm-vfl secure products failed: {exc}") from None
    if rt.here(server):
        opened = sp.decode_products(opened, frac)
    return opened, stats
