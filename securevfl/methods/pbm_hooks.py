"""The split-NN hooks of the bounded-sum methods (pbm-vfl, ldp-vfl): the plain sum of tanh-bounded
embeddings (NPQ), and PBM-VFL's PBM quantisation under secure aggregation (protocol 0)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
from torch import nn

from securevfl.context import RunContext
from securevfl.errors import ProtocolError
from securevfl.methods.dp_bottom_options import BottomPlan
from securevfl.models.release_shapes import Corners
from securevfl.privacy.pbm import pbm_estimate_sum, pbm_quantize
from securevfl.runtime.expect import Expect
from securevfl.training import EVAL, SplitNNHooks
from securevfl.training.private_bottom import BottomDP

EVAL_ROUND = 1 << 40  # round id of test-time scoring, apart from every training epoch
BOUND = 1.0  # tanh bottoms: every embedding coordinate lies in [-1, 1]


class BoundedSumHooks(SplitNNHooks):
    """NPQ: the plain sum of tanh-bounded embeddings; test scoring as ``eval`` asks."""

    aggregation = "sum"
    bounded_embeddings = True

    def __init__(
        self, ctx: RunContext, *, eval_mode: str = "plain", plan: BottomPlan | None = None
    ) -> None:
        self.eval_mode = eval_mode
        self.plan = plan or BottomPlan(None, ctx.spec.epochs)
        self.bottom_rngs = {
            k: ctx.noise_rng(k, "bottom") for k in ctx.rt.local_parties if k < ctx.info.data_parties
        }

    def bottom_update(self, ctx: RunContext, k: int) -> tuple[BottomDP, np.random.Generator] | None:
        return None if self.plan.dp is None else (self.plan.dp, self.bottom_rngs[k])

    def configure_evaluate(self, ctx: RunContext, state: Any) -> str:
        return self.eval_mode

    def saturation(self, ctx: RunContext, k: int) -> nn.Module:
        """Each coordinate at ±BOUND by its sign (the corners of the box)."""
        return Corners(BOUND)

    def round_of(self) -> tuple[int, int, int, int, int]:
        """(round id, batch id, batch size, first row, rows in the round) of the current batch:
        the schedule is public, so every party and the server derive the same values. Each
        training epoch is a round; test-time scoring is a round of its own."""
        b = self.batch
        return (EVAL_ROUND if b.phase == EVAL else b.epoch), b.index, b.size, b.start, b.n_rows


class PBMSecAggHooks(BoundedSumHooks):
    """PBM-VFL: PBM-quantize, mask (protocol 0), unmask the integer sum at the aggregator,
    estimate.

    ``senders`` (default: every data party) mask their rows; ``aggregator`` (default: the
    server) unmasks the sum. With ``--active-features`` the label holder, data party 0, is the
    aggregator and parties 1..K-1 the senders: secure aggregation runs among the senders, its
    indices 0..n-1 mapped onto their party ids, and the label holder's columns never enter it.
    With one sender (K = 2) there is nothing to aggregate: the sum of one sender is its own
    PBM output, which the aggregator would learn through secure aggregation all the same, so
    it is sent as it is (no keys, no masks) and the privacy is PBM's alone (``n_parties`` 1)."""

    def __init__(
        self,
        ctx: RunContext,
        *,
        b: int,
        beta: float,
        eval_mode: str,
        plan: BottomPlan,
        senders: list[int] | None = None,
        aggregator: int | None = None,
        eval_params: tuple[int, float] | None = None,
        delta: float | None = None,
    ) -> None:
        from protocols.secagg import SecAggParty, SecAggServer, modulus_bits

        super().__init__(ctx, eval_mode=eval_mode, plan=plan)
        self.b, self.beta = b, beta
        # test-time scoring may run at its own (b, beta): a test row's one release (release-once)
        self.eval_b, self.eval_beta = eval_params or (b, beta)
        self.senders = list(ctx.data_parties) if senders is None else list(senders)
        self.aggregator = ctx.info.server if aggregator is None else aggregator
        if self.aggregator is None or self.aggregator in self.senders:
            raise ProtocolError(
                f"secure aggregation needs an aggregator apart from the senders {self.senders}, "
                f"got {self.aggregator}"
            )
        self.sec = {k: i for i, k in enumerate(self.senders)}  # party id -> secagg index
        M = len(self.senders)
        self.single = M == 1  # one sender: its PBM output travels as it is (class docstring)
        self.bits = modulus_bits(max(b, self.eval_b) * M)
        local = [k for k in ctx.rt.local_parties if k in self.sec]
        self.rngs = {k: ctx.noise_rng(k, "pbm") for k in local}
        secure = not self.single
        self.clients = {k: SecAggParty(self.sec[k], M, bits=self.bits) for k in local if secure}
        here = ctx.rt.here(self.aggregator)
        self.server = SecAggServer(M, bits=self.bits) if here and secure else None
        for k, side in [*self.clients.items(), (self.aggregator, self.server)]:
            if side is not None:  # each party's record holds its side (its X25519 key)
                ctx.hold_key(k, "secagg", side)
        self.server_s: list[float] = []
        self.party_s: list[float] = []
        self.dropouts = 0  # party-aggregations recovered without the party (see the record)
        self.delta = delta  # the δ a scored row's ε is reported at (None: no model is saved)

    def scoring_release(self, ctx: RunContext) -> dict[str, Any] | None:
        """A privately scored row: each sender's P coordinates PBM-quantised at the test-row
        (b, beta), masked and summed by secure aggregation, estimated at the aggregator; what
        ``securevfl.model.predict_pbm`` replays with these hooks and accounts."""
        if self.delta is None:
            return None
        return {
            "mechanism": "pbm-secagg",
            "b": int(self.eval_b),
            "beta": float(self.eval_beta),
            "n_parties": len(self.senders),
            "senders": list(self.senders),
            "aggregator": int(self.aggregator),
            "dim": int(ctx.spec.embedding_dim),
            "bound": BOUND,
            "delta": float(self.delta),
        }

    def test_gain(self) -> float:
        """Var_train / Var_test of the sum's estimate (its bound C²M/(4β²b), Theorem 2.3)."""
        return float((self.eval_beta / self.beta) ** 2 * self.eval_b / self.b)

    def params(self) -> tuple[int, float]:
        """(b, beta) of the current batch: test-time scoring's or training's."""
        if self.batch is not None and self.batch.phase == EVAL:
            return self.eval_b, self.eval_beta
        return self.b, self.beta

    def key_agreement(self, ctx: RunContext) -> None:
        """X25519 public keys go to the aggregator, which relays them with a session id
        (metered)."""
        from protocols.secagg import SecAggError

        if self.single:  # nothing to mask (class docstring)
            return
        rt, S = ctx.rt, self.aggregator
        parties = self.senders
        with rt.meter.in_phase("setup"):
            pks = {k: (self.clients[k].public_key if k in self.clients else None) for k in parties}
            got = rt.gather(pks, dst=S)
            table = None
            if self.server is not None:
                try:
                    table = {
                        "keys": self.server.relay({self.sec[k]: v for k, v in got.items()}),
                        "session": self.server.session,
                        "server_key": self.server.public_key,
                    }
                except SecAggError as exc:
                    raise ProtocolError(str(exc)) from exc
            table = rt.broadcast(table, src=S, dsts=parties, expect=_key_table(len(parties)))
        for client in self.clients.values():
            client.agree(table["keys"], table["session"], table["server_key"])

    def party_message(self, ctx: RunContext, k: int, emb: np.ndarray, step: int) -> Any:
        t0 = time.perf_counter()
        rnd, batch, _, row, n = self.round_of()
        P = ctx.spec.embedding_dim
        q, _ = pbm_quantize(
            emb,
            b=self.params()[0],
            beta=self.params()[1],
            rng=self.rngs[k],
            bound=BOUND,
            party=k,
            n_parties=len(self.senders),
        )
        if self.single:
            self.party_s.append(time.perf_counter() - t0)
            return np.asarray(q, dtype=np.int64)
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
        rnd, batch, B, row, _ = self.round_of()
        P = ctx.spec.embedding_dim
        got = rt.gather({k: messages.get(k) for k in self.senders}, dst=dst)
        t0 = time.perf_counter()
        if self.single:
            return self._estimate(np.asarray(got[self.senders[0]]), B, P, 1, t0) if got else None
        try:
            # masked values in; the survivor list out to each survivor, its vouches back (the
            # consistency round); one unmasking request out to each survivor, its answer back
            checks = None
            if self.server is not None:
                checks = self.server.collect(
                    {self.sec[k]: v for k, v in got.items()},
                    round_id=rnd,
                    batch_id=batch,
                    count=B * P,
                    offset=row * P,
                )
            vouches = {}
            for k in self.senders:
                check = checks.get(self.sec[k]) if checks is not None else None
                check = rt.send(check, src=dst, dst=k)
                if k in self.clients and check is not None:
                    vouches[k] = self.clients[k].vouch(check)
            vouches = rt.gather({k: vouches.get(k) for k in self.senders}, dst=dst)
            reqs = None
            if self.server is not None:
                reqs = self.server.requests({self.sec[k]: v for k, v in vouches.items()})
            answers = {}
            for k in self.senders:
                req = rt.send(reqs.get(self.sec[k]) if reqs is not None else None, src=dst, dst=k)
                if k in self.clients and req is not None:
                    answers[k] = self.clients[k].respond(req)
            answers = rt.gather({k: answers.get(k) for k in self.senders}, dst=dst)
            if self.server is None:
                return None
            q_hat = self.server.finish({self.sec[k]: v for k, v in answers.items()})
            if len(self.server.survivors) < len(self.senders):
                self.dropouts += len(self.senders) - len(self.server.survivors)
        except SecAggError as exc:
            raise ProtocolError(str(exc)) from exc
        # after a dropout the sum runs over the survivors: centre by their number
        return self._estimate(q_hat, B, P, len(self.server.survivors), t0)

    def _estimate(self, q_sum: np.ndarray, B: int, P: int, n: int, t0: float) -> np.ndarray:
        """The aggregator's estimate of the sum of ``n`` senders' embeddings."""
        if q_sum.size != B * P:
            raise ProtocolError(f"a PBM sum must have {B * P} values, got {q_sum.size}")
        b, beta = self.params()
        h = pbm_estimate_sum(q_sum.reshape(B, P), b=b, beta=beta, n_parties=n, bound=BOUND)
        self.server_s.append(time.perf_counter() - t0)
        return h.astype(np.float32)


def _key_table(n: int) -> Expect:
    """The aggregator's relayed table: each sender's 32-byte X25519 key by secagg index, a
    16-byte session id and its own key."""
    key = Expect("key table", kind="bytes", min_len=32, max_len=32)
    keys = Expect("key table", kind="dict", fields=tuple((j, key) for j in range(n)))
    session = Expect("key table", kind="bytes", min_len=16, max_len=16)
    fields = (("keys", keys), ("session", session), ("server_key", key))
    return Expect("key table", kind="dict", fields=fields)
