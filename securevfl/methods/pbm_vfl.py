"""PBM-VFL (Tran, Castiglia, Patterson, Milanova) and the paper's baselines NPQ and LDP-VFL.

M data parties (0..M-1) each run a bottom model with tanh-bounded embeddings (C = 1); the server
(index M) holds the labels and a fusion model on the SUM of the embeddings (Eq. 1-3); the gradient
w.r.t. the sum goes back to every party (Algorithm 2). The three methods differ only in what a
party sends and how the server combines it:

* ``pbm-vfl``: each coordinate is quantized by PBM (Algorithm 1), the integer vectors are summed by
  secure aggregation (``protocols.secagg``: X25519 keys in phase "setup", pair and self masks
  mod 2^r, r-bit packing, HMAC-authenticated messages, Shamir-shared self-mask seeds so a round
  survives dropouts), the server estimates the sum as C/(beta b) (q_hat - bM/2). Privacy: PLD of
  the sampler's exact pmf (``pbm_accountant``).
* ``npq``: Algorithm 2 without PBM and secure aggregation (plain embeddings, plain sum).
* ``ldp-vfl``: every party adds N(0, 2M/(b beta^2)) to each coordinate, no secure aggregation.

Test-time scoring (``--eval private``, the default) runs through the same aggregation as
training, so the server never sees a plain embedding; ``--eval plain`` scores on plain
embeddings with the core's ``predict_splitnn`` (the model's accuracy without inference noise;
listed in the record's ``privacy.outside_guarantee``).

Privacy units (neighbouring datasets differ by substitution of):

* ``party-row`` (the paper's "feature privacy", the headline ``privacy.epsilon``): one row of
  one data party's block; that party's embedding of the row may move anywhere in [-C, C]^P;
* ``sample`` ("sample privacy", ``privacy.by_unit.sample``): the row in every data party's
  block (and its label, which the server holds in the clear: labels are not protected).

Which releases count. Per row, PBM-VFL releases the P coordinates' secure sums once per epoch
for a training row and once for a test row under private scoring; LDP-VFL the same counts of
noisy embeddings. Counting only those (the seed paper's figures, kept in
``privacy.per_row_only``) is not a guarantee: the bottom models train on every row with exact
inputs, so every later release of every other row depends on a row once it was used. Each
release's worst-case pair does not depend on which rows it concerns (PBM: the dominating pair
holds for any inputs in [-C, C]; LDP: the clipped embedding moves by at most 2C per
coordinate), so the headline composes every release of a party's rows in the run: P·(E·n_train
+ n_test) PBM releases (RDP, dp_accounting's conversion) or Gaussian uses. That bound is large:
it is what the algorithm as run can claim.

``--epsilon E --delta D``: ``pbm-vfl`` keeps b and calibrates beta on the 2^-12 grid (the
sampler's own resolution) by bisection on the headline's accountant, so the headline epsilon is <= E
and within 2% of E; where one grid step of beta is too coarse for 2% it lowers b instead at the
next beta (``calibrate_beta``; the b and beta used are in ``privacy.sampler``); ``ldp-vfl``
calibrates its sigma (b and beta then play no part). Without ``--epsilon`` both take their
noise from --b and --beta as before.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from securevfl.context import Option, RunContext, RunSpec
from securevfl.errors import ConfigError, ProtocolError
from securevfl.methods.base import Method, register_method
from securevfl.privacy.accountant import Accountant, PrivacyLedger, calibrate
from securevfl.privacy.events import PrivacyReport
from securevfl.privacy.pbm import (
    _GRID_BITS,
    check_pbm_params,
    grid_levels,
    ldp_sigma,
    pbm_estimate_sum,
    pbm_quantize,
)
from securevfl.privacy.pbm_accountant import ldp_event, pbm_epsilon, pbm_event, pbm_ledger
from securevfl.results import FitResult
from securevfl.training import (
    SplitNNHooks,
    n_batches,
    predict_splitnn,
    splitnn_fingerprints,
    train_splitnn,
)

DEFAULT_DELTA = 1e-5
EVAL_ROUND = 1 << 40  # round id of test-time scoring, apart from every training epoch
BOUND = 1.0  # tanh bottoms: every embedding coordinate lies in [-1, 1]
PBM_OPTIONS = {
    # b: a run's cost grows faster than b (one epoch on breast, loaded 2-core machine: b = 128
    # 13 s, b = 512 128 s); beta below 2^-12 leaves no level on p's grid
    "b": Option(int, 64, "PBM trials per coordinate", ge=1, le=1024),
    "beta": Option(float, 0.25, "PBM beta", ge=2.0**-12, le=0.25),
    "eval": Option(
        str,
        "private",
        "test-time scoring through the private aggregation "
        "('private') or on plain embeddings ('plain')",
        choices=("private", "plain"),
    ),
}


def _all_senders(ctx: RunContext, messages: Mapping[int, Any]) -> dict[int, Any]:
    """Every data party as a key (None where it does not live): a networked gather needs the
    same sender list in every process, and the trainer passes only local parties' messages."""
    return {k: messages.get(k) for k in ctx.data_parties}


class BoundedSumHooks(SplitNNHooks):
    """NPQ: the plain sum of tanh-bounded embeddings."""

    aggregation = "sum"
    bounded_embeddings = True

    def __init__(self, ctx: RunContext) -> None:
        self.n_batches = n_batches(ctx.info.n_train, ctx.spec.batch_size)
        self.correct = np.zeros(ctx.spec.epochs)

    def aggregate(
        self, ctx: RunContext, messages: Mapping[int, Any], *, dst: int, step: int
    ) -> np.ndarray | None:
        return super().aggregate(ctx, _all_senders(ctx, messages), dst=dst, step=step)

    def observe(self, ctx: RunContext, step: int, outputs: np.ndarray, y: np.ndarray) -> None:
        # train accuracy of the forward pass the server actually ran (noisy sums included)
        if ctx.info.task != "regression":
            self.correct[step // self.n_batches] += int(np.sum(outputs.argmax(axis=1) == y))

    def batch_of(self, ctx: RunContext, step: int) -> tuple[int, int, int, int, int]:
        """(round id, batch id, batch size, first row, rows in the round) of a step: the
        minibatch schedule is public, so every party and the server derive the same values."""
        if step < 0:  # test-time scoring: its own round id, chunks of the test split
            n, rnd, batch = ctx.info.n_test, EVAL_ROUND, -step - 1
        else:
            n = ctx.info.n_train
            rnd, batch = divmod(step, self.n_batches)
        bs = min(ctx.spec.batch_size, n)
        return rnd, batch, min(bs, n - batch * bs), batch * bs, n


class LDPHooks(BoundedSumHooks):
    """LDP-VFL: Gaussian noise of variance 2M/(b beta^2) on every coordinate of every embedding."""

    def __init__(self, ctx: RunContext, *, sigma: float) -> None:
        super().__init__(ctx)
        self.sigma = sigma
        self.rngs = {
            k: ctx.noise_rng(k, "ldp-vfl")
            for k in ctx.rt.local_parties
            if k < ctx.info.data_parties
        }

    def party_message(self, ctx: RunContext, k: int, emb: np.ndarray, step: int) -> Any:
        return (emb + self.rngs[k].normal(0.0, self.sigma, size=emb.shape)).astype(np.float32)


class PBMSecAggHooks(BoundedSumHooks):
    """PBM-VFL: PBM-quantize, mask (protocol 0), unmask the integer sum at the server, estimate."""

    def __init__(self, ctx: RunContext, *, b: int, beta: float) -> None:
        from protocols.secagg import SecAggParty, SecAggServer, modulus_bits

        super().__init__(ctx)
        self.b, self.beta = b, beta
        M = ctx.info.data_parties
        self.bits = modulus_bits(b * M)
        local = [k for k in ctx.rt.local_parties if k < M]
        self.rngs = {k: ctx.noise_rng(k, "pbm") for k in local}
        self.clients = {k: SecAggParty(k, M, bits=self.bits) for k in local}
        self.server = SecAggServer(M, bits=self.bits) if ctx.rt.here(ctx.info.server) else None
        self.server_s: list[float] = []
        self.party_s: list[float] = []
        self.dropouts = 0  # party-aggregations recovered without the party (see the record)

    def key_agreement(self, ctx: RunContext) -> None:
        """X25519 public keys go to the server, which relays them with a session id (metered)."""
        from protocols.secagg import SecAggError

        rt, S = ctx.rt, ctx.info.server
        parties = list(ctx.data_parties)
        with rt.meter.in_phase("setup"):
            pks = {k: (self.clients[k].public_key if k in self.clients else None) for k in parties}
            got = rt.gather(pks, dst=S)
            table = None
            if self.server is not None:
                try:
                    table = {
                        "keys": self.server.relay(got),
                        "session": self.server.session,
                        "server_key": self.server.public_key,
                    }
                except SecAggError as exc:
                    raise ProtocolError(str(exc)) from exc
            table = rt.broadcast(table, src=S, dsts=parties)
        for client in self.clients.values():
            client.agree(table["keys"], table["session"], table["server_key"])

    def party_message(self, ctx: RunContext, k: int, emb: np.ndarray, step: int) -> Any:
        t0 = time.perf_counter()
        rnd, batch, _, row, n = self.batch_of(ctx, step)
        P = ctx.spec.embedding_dim
        q, _ = pbm_quantize(
            emb,
            b=self.b,
            beta=self.beta,
            rng=self.rngs[k],
            bound=BOUND,
            party=k,
            n_parties=ctx.info.data_parties,
        )
        if batch == 0:  # one keystream per pair and round (epoch), a disjoint segment per batch
            self.clients[k].prepare_round(rnd, n * P)
        msg = self.clients[k].mask(q, round_id=rnd, batch_id=batch, offset=row * P)
        self.party_s.append(time.perf_counter() - t0)
        return msg

    def aggregate(
        self, ctx: RunContext, messages: Mapping[int, Any], *, dst: int, step: int
    ) -> np.ndarray | None:
        from protocols.secagg import SecAggError

        rt = ctx.rt
        rnd, batch, B, row, _ = self.batch_of(ctx, step)
        P = ctx.spec.embedding_dim
        got = rt.gather(_all_senders(ctx, messages), dst=dst)
        t0 = time.perf_counter()
        try:
            # masked values in, one unmasking request out to each survivor, its answer back
            reqs = None
            if self.server is not None:
                reqs = self.server.collect(
                    got, round_id=rnd, batch_id=batch, count=B * P, offset=row * P
                )
            answers = {}
            for k in ctx.data_parties:
                req = rt.send(reqs.get(k) if reqs is not None else None, src=dst, dst=k)
                if k in self.clients and req is not None:
                    answers[k] = self.clients[k].respond(req)
            answers = rt.gather(_all_senders(ctx, answers), dst=dst)
            if self.server is None:
                return None
            q_hat = self.server.finish(answers)
            if len(self.server.survivors) < ctx.info.data_parties:
                self.dropouts += ctx.info.data_parties - len(self.server.survivors)
        except SecAggError as exc:
            raise ProtocolError(str(exc)) from exc
        h = pbm_estimate_sum(
            q_hat.reshape(B, P),
            b=self.b,
            beta=self.beta,
            # after a dropout the sum runs over the survivors: centre by their number
            n_parties=len(self.server.survivors),
            bound=BOUND,
        ).astype(np.float32)
        self.server_s.append(time.perf_counter() - t0)
        return h


def predict_private(ctx: RunContext, state: Any, hooks: BoundedSumHooks) -> np.ndarray | None:
    """Score the test split through the method's own aggregation (PBM + secure aggregation, or
    noisy embeddings), in batches, metered as phase 'eval': the server never sees plain
    embeddings, at training or at inference time."""
    import torch

    rt, info, L = ctx.rt, ctx.info, ctx.info.label_party
    bs = min(ctx.spec.batch_size, info.n_test)
    outs = []
    with rt.meter.in_phase("eval"), torch.no_grad():
        for chunk, start in enumerate(range(0, info.n_test, bs)):
            step = -chunk - 1
            msgs = {
                k: hooks.party_message(
                    ctx,
                    k,
                    m(
                        torch.as_tensor(
                            ctx.views[k].X_test[start : start + bs], dtype=torch.float32
                        )
                    ).numpy(),
                    step,
                )
                for k, m in state.bottoms.items()
            }
            agg = hooks.aggregate(ctx, msgs, dst=L, step=step)
            if rt.here(L):
                outs.append(state.top(torch.as_tensor(agg, dtype=torch.float32)))
    if not rt.here(L):
        return None
    out = torch.cat(outs)
    if info.task == "regression":
        return out[:, 0].numpy().astype(float)
    return torch.softmax(out, dim=1).numpy().astype(float)


class _SumSplitNN(Method):
    """Shared shape of the three methods: split-NN, server with labels and fusion model."""

    models = ("mlp",)
    uses_server = True
    labels_at_server = True

    def validate(self, spec: RunSpec) -> None:
        super().validate(spec)
        if spec.aggregation != "sum":
            raise ConfigError(
                f"aggregation for method {self.name!r} must be 'sum' (the server "
                f"sees only the sum of embeddings), got {spec.aggregation!r}"
            )

    def pbm_params(self, spec: RunSpec) -> tuple[int, float]:
        mode = spec.option("eval", self)
        if mode not in ("private", "plain"):
            raise ConfigError(f"eval must be 'private' or 'plain', got {mode!r}")
        return check_pbm_params(spec.option("b", self), spec.option("beta", self))

    def _finish(
        self,
        ctx: RunContext,
        hooks: BoundedSumHooks,
        privacy: PrivacyReport | None,
        extra: dict[str, Any],
    ) -> FitResult:
        cpu0 = time.process_time()
        state, train_s = train_splitnn(ctx, hooks)
        # CPU seconds as well: wall time on a shared 2-core machine grows with others' load
        extra["epoch_train_cpu_s"] = (time.process_time() - cpu0) / ctx.spec.epochs
        if "eval" in self.options and ctx.spec.option("eval", self) == "private":
            scores = predict_private(ctx, state, hooks)
        else:
            scores = predict_splitnn(ctx, state, hooks)
        losses = state.losses
        nb = n_batches(ctx.info.n_train, ctx.spec.batch_size)
        if losses:
            extra["epoch_train_loss"] = [
                float(np.mean(losses[e * nb : (e + 1) * nb])) for e in range(ctx.spec.epochs)
            ]
            if ctx.info.task != "regression":
                extra["epoch_train_accuracy"] = [float(c / ctx.info.n_train) for c in hooks.correct]
        extra["epoch_train_s"] = train_s / ctx.spec.epochs
        if scores is not None and ctx.info.task == "binary":
            from sklearn.metrics import average_precision_score

            # AUPRC, the metric of the paper's phishing figures
            y = ctx.views[ctx.info.label_party].y_test
            extra["auprc"] = float(average_precision_score(y, np.asarray(scores)[:, 1]))
        return FitResult(
            scores, train_s, privacy=privacy, fingerprints=splitnn_fingerprints(state), extra=extra
        )


@register_method
class NPQ(_SumSplitNN):
    name = "npq"
    summary = "PBM-VFL's baseline: Algorithm 2 without PBM or secure aggregation (no privacy)"
    family = "plain"

    def fit(self, ctx: RunContext) -> FitResult:
        return self._finish(ctx, BoundedSumHooks(ctx), None, {})


@register_method
class LDPVFL(_SumSplitNN):
    name = "ldp-vfl"
    summary = "PBM-VFL's baseline: Gaussian noise 2M/(b beta^2) per embedding coordinate, no secagg"
    family = "dp"
    options = PBM_OPTIONS
    accepts_epsilon = True  # sets the noise; without it, the noise of (b, beta)

    def fit(self, ctx: RunContext) -> FitResult:
        spec = ctx.spec
        b, beta = self.pbm_params(spec)
        M, P, E = ctx.info.data_parties, spec.embedding_dim, spec.epochs
        delta = spec.delta or DEFAULT_DELTA

        # every release of a party's rows counts (module docstring): all uses of all its rows
        uses = E * ctx.info.n_train + (ctx.info.n_test if _private_eval(self, spec) else 0)

        def eps_of(unit: str, sigma: float, uses: int = uses) -> float:
            ev = ldp_event(unit, sigma=sigma, n_parties=M, dim=P, uses=uses, bound=BOUND)
            return Accountant().compose(ev).get_epsilon(delta)

        if spec.epsilon is None:
            sigma = ldp_sigma(b=b, beta=beta, n_parties=M)
        else:
            sigma, eps = calibrate(
                lambda s: eps_of("party-row", s),
                float(spec.epsilon),
                lo=1e-4,
                hi=1e6,
                what="sigma",
            )
            if eps < 0.98 * float(spec.epsilon):
                raise ConfigError(
                    f"epsilon {spec.epsilon:g} cannot be met within 2%: sigma 1e-4 gives {eps:.4g}"
                )
        ledger = PrivacyLedger("party-row")
        for k in ctx.data_parties:
            ledger.compose(
                k, ldp_event("party-row", sigma=sigma, n_parties=M, dim=P, uses=uses, bound=BOUND)
            )
        report = ledger.report(
            delta,
            target_epsilon=spec.epsilon,
            outside_guarantee=_outside(self, spec),
            extra={
                "by_unit": {
                    "party-row": eps_of("party-row", sigma),
                    "sample": eps_of("sample", sigma),
                },
                "per_row_only": eps_of("party-row", sigma, E),
                "sigma": sigma,
                "releases_per_row": {"train": P * E, "test": P if _private_eval(self, spec) else 0},
            },
        )
        return self._finish(ctx, LDPHooks(ctx, sigma=sigma), report, {"sigma": sigma})


@register_method
class PBMVFL(_SumSplitNN):
    name = "pbm-vfl"
    summary = "PBM-quantized embeddings summed by pairwise-mask secure aggregation; PLD ε"
    family = "dp+mpc"
    options = PBM_OPTIONS
    accepts_epsilon = True  # sets beta (and b); without it, the given (b, beta)

    def validate(self, spec: RunSpec) -> None:
        from protocols.secagg import MAX_BITS

        super().validate(spec)
        b = spec.option("b", self)
        if (b * spec.parties).bit_length() > MAX_BITS:
            raise ConfigError(
                f"b * parties must be < 2^{MAX_BITS} for secure aggregation, got {b * spec.parties}"
            )

    def fit(self, ctx: RunContext) -> FitResult:
        spec = ctx.spec
        b, beta = self.pbm_params(spec)
        M, P, E = ctx.info.data_parties, spec.embedding_dim, spec.epochs
        delta = spec.delta or DEFAULT_DELTA
        if spec.epsilon is not None:
            b, beta = calibrate_beta(
                float(spec.epsilon),
                b=b,
                n_parties=M,
                dim=P,
                uses=E * ctx.info.n_train + (ctx.info.n_test if _private_eval(self, spec) else 0),
                delta=delta,
            )
        report = pbm_report(
            b=b,
            beta=beta,
            n_parties=M,
            dim=P,
            epochs=E,
            delta=delta,
            parties=list(ctx.data_parties),
            n_rows=(ctx.info.n_train, ctx.info.n_test if _private_eval(self, spec) else 0),
            outside_guarantee=_outside(self, spec),
            target_epsilon=spec.epsilon,
        )
        hooks = PBMSecAggHooks(ctx, b=b, beta=beta)
        hooks.key_agreement(ctx)
        result = self._finish(ctx, hooks, report, {"bits_per_value": hooks.bits})
        if hooks.server_s:
            ms = np.array(hooks.server_s) * 1e3
            result.extra["secagg_server_ms"] = {
                "median": float(np.median(ms)),
                "max": float(ms.max()),
            }
        if hooks.server is not None:
            result.extra["secagg_dropouts"] = hooks.dropouts
            if hooks.dropouts and result.privacy is not None:
                # a recovered round sums fewer parties' PBM noise than the accountant's M
                # assumes: the figure no longer covers it
                result.privacy = dataclasses.replace(
                    result.privacy,
                    epsilon=None,
                    outside_guarantee=(
                        *result.privacy.outside_guarantee,
                        f"secure aggregation recovered {hooks.dropouts} party dropout(s): those "
                        "sums hold fewer parties' PBM noise than the accountant assumes",
                    ),
                )
        if hooks.party_s:
            result.extra["pbm_party_ms_median"] = float(np.median(hooks.party_s) * 1e3)
        return result


def _private_eval(method: Method, spec: RunSpec) -> bool:
    return "eval" in method.options and spec.option("eval", method) == "private"


def _outside(method: Method, spec: RunSpec) -> list[str]:
    """What the run releases that its per-row epsilon does not cover."""
    out = []
    if not _private_eval(method, spec):
        out.append("test-time scoring on plain embeddings (--eval plain): the server sees them")
    return out


def _grid_beta(level: int) -> float:
    return level / (1 << _GRID_BITS)


def calibrate_beta(
    target: float, *, b: int, n_parties: int, dim: int, uses: int, delta: float
) -> tuple[int, float]:
    """(b, beta) whose party-row epsilon(delta) is <= ``target`` and within 2% of it.

    First the largest beta on the 2^-12 grid at the given b, by bisection (``calibrate``) over
    the noise parameter 1/beta. Where one grid step of beta moves epsilon by more than 2% (small
    beta), beta goes one step up and b down: the largest b' <= b meeting the target, by integer
    bisection (epsilon grows with b), trying up to 16 levels up. An error if none gets within
    2%."""

    def eps_at(level: int, trials: int) -> float:
        return pbm_epsilon(
            "party-row",
            b=trials,
            beta=_grid_beta(level),
            n_parties=n_parties,
            dim=dim,
            uses=uses,
            delta=delta,
            kind="rdp",
        )

    def eps_of(s: float) -> float:
        return eps_at(max(1, int((1 << _GRID_BITS) / s)), b)

    if eps_at(1, b) > target:  # even the smallest beta is too much at this b: fewer trials
        s, eps = float(1 << _GRID_BITS), eps_at(1, b)
    else:
        s, eps = calibrate(eps_of, target, lo=4.0, hi=float(1 << _GRID_BITS), what="1/beta")
    level = max(1, int((1 << _GRID_BITS) / s))
    if 0.98 * target <= eps <= target:
        return b, _grid_beta(level)
    # coarser grid steps: a few levels up, each with the largest b' <= b meeting the target
    start = level if eps > target else level + 1
    for up in range(start, min(level + 17, (1 << (_GRID_BITS - 2)) + 1)):
        lo_b, hi_b = 0, b  # eps_at(up, lo_b) <= target < eps_at(up, hi_b), eps(b = 0) = 0
        best = 0.0
        if eps_at(up, b) <= target:
            continue  # cannot happen above the bisection's level; keeps the invariant
        while hi_b - lo_b > 1:
            mid = (lo_b + hi_b) // 2
            e = eps_at(up, mid)
            lo_b, hi_b, best = (mid, hi_b, e) if e <= target else (lo_b, mid, best)
        if lo_b >= 1 and best >= 0.98 * target:
            return lo_b, _grid_beta(up)
    raise ConfigError(
        f"epsilon {target:g} cannot be met within 2% at b <= {b}: beta on the 2^-12 grid gives "
        f"{eps:.4g} at beta = {_grid_beta(level):g} (beta <= 1/4), more at the next level; "
        "change --b"
    )


def pbm_report(
    *,
    b: int,
    beta: float,
    n_parties: int,
    dim: int,
    epochs: int,
    delta: float,
    parties: list[int],
    n_rows: tuple[int, int],
    outside_guarantee: list[str],
    target_epsilon: float | None = None,
) -> PrivacyReport:
    """The record's ``privacy`` for PBM-VFL: party-row headline, sample unit, RDP cross-check."""
    M, P, E = n_parties, dim, epochs
    n_train, n_test = n_rows
    every = E * n_train + n_test  # uses of a party's rows; each may depend on any of them
    # the headline: every release of the run, by RDP (a PLD of so many compositions is costly)
    ledger = pbm_ledger(b=b, beta=beta, n_parties=M, dim=P, uses=every, parties=parties, kind="rdp")
    per_row = dict(b=b, beta=beta, n_parties=M, dim=P, uses=E, delta=delta, kind="rdp")
    j_lo, j_hi = grid_levels(beta)
    report = ledger.report(
        delta,
        outside_guarantee=outside_guarantee,
        target_epsilon=target_epsilon,
        extra={
            "per_row_only": {
                "party-row": pbm_epsilon("party-row", **per_row),
                "sample": pbm_epsilon("sample", **per_row),
                "note": "a row's own releases only (the seed paper's figure): not a guarantee, "
                "the bottom models carry each row into the later releases of other rows",
            },
            "releases_per_party": P * every,
            "sampler": {
                "b": b,
                "beta": beta,
                "p_levels": [j_lo / (1 << _GRID_BITS), j_hi / (1 << _GRID_BITS)],
                "pmf": "exact Binomial(b, j / 2^12)",
            },
            "releases_per_row": {"train": P * E, "test": P if n_test else 0},
        },
    )
    # one sample changes every party's rows: M parties' releases compose (an upper bound)
    report.extra["by_unit"] = {
        "party-row": report.epsilon,
        "sample": Accountant("rdp")
        .compose(pbm_event("sample", b=b, beta=beta, n_parties=M), P * every)
        .get_epsilon(delta),
    }
    return report
