"""HE-VFL on the shared GLM trainer: the hooks that encrypt, combine and open, and a phase clock.

The trainer owns the loop (batching, updates, proximal step, bias, epochs); these hooks change
what passive parties send (encrypted IRs), how the active party combines them (ciphertext sum plus
its plain part, minus 2y: the Taylor residual 4 dl/dt, encrypted), and how gradients are formed
(masked encrypted X^T(4d) opened by the key holder; see :mod:`baselines.he_vfl`).

Where each second goes is recorded per phase (encrypt, combine, multiply, decrypt, serialize,
send, other) and each byte per protocol message (ir, residual, gradient, opened), as the channel
metered it.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Any

import numpy as np

from securevfl.context import RunContext
from securevfl.models.glm import GLMLoss
from securevfl.training import GLMHooks, minibatches, n_batches


class PhaseClock:
    """Wall seconds per named phase (nested phases count in the innermost one only)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._stack: list[list[float]] = []

    @contextmanager
    def __call__(self, phase: str):
        t0 = time.perf_counter()
        self._stack.append([0.0])  # time spent in phases nested inside this one
        try:
            yield
        finally:
            inner = self._stack.pop()[0]
            spent = time.perf_counter() - t0
            self.seconds[phase] += spent - inner
            if self._stack:
                self._stack[-1][0] += spent


def _meter_bytes(rt) -> int:
    return sum(c.bytes_total for c in rt.meter.phases.values())


class HEHooks(GLMHooks):
    """GLM trainer hooks of the HE-VFL protocol over one :class:`baselines.he_schemes.Scheme`."""

    def __init__(self, ctx: RunContext, scheme: Any, batches: int) -> None:
        self.scheme, self.batches = scheme, batches
        self.K = ctx.info.data_parties
        self.clock = scheme.clock
        self.bytes: dict[str, int] = defaultdict(int)
        local = [k for k in ctx.rt.local_parties if k < self.K]
        self.rngs = {k: ctx.noise_rng(k, "he-vfl/mask") for k in local}
        self.ctx, self.local = ctx, local
        self.X: dict[int, np.ndarray] = {}  # party -> this minibatch's rows (from waiting)
        self._open: tuple[str, float, int] | None = None
        self.epoch_s: list[float] = []
        self.epoch_cpu: list[float] = []
        self._t = (time.perf_counter(), time.process_time())

    def start(self) -> None:
        """Start the epoch clock (call right before the trainer)."""
        self._plan(0)
        self._t = (time.perf_counter(), time.process_time())

    def _plan(self, epoch: int) -> None:
        """Tell each local party's engine the minibatches of ``epoch`` it will encode (the
        shared order: a table on the engine brings several in with one pass)."""
        ctx = self.ctx
        if epoch >= ctx.spec.epochs:
            return
        n = ctx.info.n_train
        run = self.batches_per_epoch(ctx, n_batches(n, ctx.spec.batch_size))
        batches = minibatches(n, ctx.spec.batch_size, seed=ctx.shared_seed, epoch=epoch)
        planned = list(itertools.islice(batches, run))
        for k in self.local:
            ctx.engine(k).plan(ctx.views[k].X_train, planned)

    def _rows(self, ctx, k: int, idx) -> np.ndarray:
        """Party k's rows of the minibatch through its engine; party 0's gradient message
        carries the bias through a column of ones."""
        X = ctx.engine(k).rows(ctx.views[k].X_train, idx)
        return np.hstack([X, np.ones((len(idx), 1))]) if k == 0 else X

    def send(self, message: str, fn, *args, **kwargs):
        """A runtime transfer, timed as phase send; its metered bytes count under ``message``."""
        rt = self.scheme.ctx.rt
        before = _meter_bytes(rt)
        with self.clock("send"):
            out = fn(*args, **kwargs)
        self.bytes[message] += _meter_bytes(rt) - before
        return out

    def _mark(self, message: str) -> None:
        """The trainer moves the IRs and the residual itself: note where its transfer begins."""
        self._open = (message, time.perf_counter(), _meter_bytes(self.scheme.ctx.rt))

    def _close(self) -> None:
        """Count the trainer's transfer since :meth:`_mark` as 'send' (in-process: exactly it)."""
        if self._open is not None:
            message, t0, b0 = self._open
            self.clock.seconds["send"] += time.perf_counter() - t0
            self.bytes[message] += _meter_bytes(self.scheme.ctx.rt) - b0
            self._open = None

    def _next_rows(self, ctx, step: int) -> int:
        """Rows of the minibatch after ``step`` (0 after the run's last one)."""
        n, b = ctx.info.n_train, ctx.spec.batch_size
        per_epoch = self.batches_per_epoch(ctx, -(-n // b))
        nxt = step + 1
        if nxt >= per_epoch * ctx.spec.epochs:
            return 0
        return min(b, n - (nxt % per_epoch) * b)

    # ---- GLM trainer plug points ----------------------------------------------------------

    def waiting(self, ctx, k, idx, step, own=None, y=None):
        # what party k's messages of this minibatch need but the awaited one does not: feature
        # tiles and masks (and party 0's plain part of the residual), encoded now
        t0 = time.perf_counter()
        self.X[k] = self._rows(ctx, k, idx)
        plain = own - 2.0 * y if own is not None else None
        self.scheme.prepare(k, self.X[k], self.rngs[k], plain)
        if self._open is not None:  # in-process, inside the IRs' transfer: not 'send' time
            message, t_mark, b0 = self._open
            self._open = (message, t_mark + time.perf_counter() - t0, b0)

    def batches_per_epoch(self, ctx, n):
        return min(n, self.batches) if self.batches else n

    def passive_message(self, ctx, k, ir, step):
        out = self.scheme.encrypt_ir(k, ir)
        self._mark("ir")
        return out

    def combine(self, ctx, loss: GLMLoss, own, received, y, step):
        self._close()
        # the Taylor residual times 4: sum_k u_k + X_0 w_0 + b - 2y (encrypted), no loss value
        msg = self.scheme.combine(0, received, own - 2.0 * y)
        self._mark("residual")
        return msg, msg, None

    def active_uses_exact(self) -> bool:
        return False  # the active party, too, only holds the encrypted residual

    def message_expect(self, ctx, step_name, rows):
        # training messages are the scheme's (ciphertexts); scores are plain
        if step_name == "scores":
            return super().message_expect(ctx, step_name, rows)
        return self.scheme.rules.rows(step_name, rows)

    def gradients(self, ctx, idx, derivs, step):
        self._close()
        rt, C, b = ctx.rt, self.K, len(idx)
        masks, msgs = {}, {}
        for k, d_msg in derivs.items():
            X = self.X.pop(k, None)
            X = X if X is not None and len(X) == len(idx) else self._rows(ctx, k, idx)
            msgs[k], masks[k] = self.scheme.gradient_message(k, d_msg, X, self.rngs[k])
        out, rows = {}, self._next_rows(ctx, step)
        # one party at a time, party 0 first (it made the residual, so its products start
        # first): the key holder opens each gradient as it arrives and returns it at once,
        # while the next party still multiplies; same messages as a gather, same bytes
        rules = self.scheme.rules  # what the key holder and each party accept
        for k in range(C):
            mine = msgs.get(k)
            got = self.send("gradient", rt.send, mine, src=k, dst=C, expect=rules.gradient(k))
            opened = None
            if rt.here(C):
                opened = self.scheme.open(got, ctx.info.features_per_party[k] + (k == 0), k)
            if k in derivs and k != 0:  # waiting for the key holder: next encryption's Enc(0)
                with self.clock("encrypt"):
                    self.scheme.precompute(k, rows, 1.0)
            back = self.send("opened", rt.send, opened, src=C, dst=k, expect=rules.opened(k))
            if k in derivs:
                with self.clock("other"):
                    g = self.scheme.unmask(k, back, masks[k]) / (4.0 * b)  # undo the factor 4
                rt.keep_local(k, "weight-gradient", g)  # k unmasks it: its view holds it
                out[k] = (g[:-1], float(g[-1])) if k == 0 else (g, 0.0)
        return out

    def end_epoch(self, ctx, epoch):
        now = (time.perf_counter(), time.process_time())
        self.epoch_s.append(now[0] - self._t[0])
        self.epoch_cpu.append(now[1] - self._t[1])
        self._plan(epoch + 1)  # the next epoch's first wave starts on the workers
        self._t = (time.perf_counter(), time.process_time())
