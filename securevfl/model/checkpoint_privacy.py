"""The privacy side of a checkpointed DP run: the ledger resumed, no release forgotten.

A checkpoint of a DP run keeps, besides the models (``securevfl.model.checkpoint``):

* **the releases so far**: every leaf event the trainer composed into the run's ledger (mechanism,
  noise multiplier σ/Δ, count: public facts, no data), restored into the resumed run's ledger;
* **a write-ahead log** per party (``party_<k>/started.log``): a line ``epoch e`` is appended and
  fsynced before epoch e's first release, ``eval`` before the test split is scored. A checkpoint
  notes how many lines it covers; on resume every later line is a stage that may have released
  before the kill. Under the CSPRNG the resumed run re-runs it with fresh noise, so the stage's
  events are composed once more (``privacy.resumed`` says how many, and a warning says why ε
  exceeds the target). In the reproduction mode (``--reproducible-noise``) the resumed run
  re-sends exactly the messages sent before (below), which is not a new release;
* **the hooks' own state** (``hooks.checkpoint_state``): e.g. the number of noise draws each
  party consumed. The CSPRNG's key is never written (``docs/privacy-boundaries.md``): a resumed
  run draws from a fresh key. In the reproduction mode the noise comes from ``--seed``, so its
  position is public: the hooks skip that many draws and the resumed run ends bit for bit where
  an uninterrupted run ends.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from securevfl.errors import DataError

if TYPE_CHECKING:  # the events are imported where one is read or written: a run without a
    # ledger (no DP) never loads dp_accounting (~1.4 s a process)
    from dp_accounting import dp_event

STATEFUL = "its hooks hold state (noise streams, releases) a checkpoint does not keep"
_LINE = re.compile(r"start|epoch \d+|eval")
_SKIP_BLOCK = 1 << 20  # standard normals drawn per call when skipping ahead (bounded memory)


def skip_normals(rng: Any, n: int) -> None:
    """Advance ``rng`` past ``n`` standard normals (numpy's ``normal`` and ``standard_normal``
    consume the generator one variate at a time, whatever the call's shape)."""
    while n > 0:
        m = min(n, _SKIP_BLOCK)
        rng.standard_normal(m)
        n -= m


def event_json(event: dp_event.DpEvent, count: int) -> dict[str, Any]:
    from securevfl.privacy.events import describe_release

    return describe_release(event, count)


def event_of(doc: dict[str, Any]) -> tuple[dp_event.DpEvent, int]:
    """A leaf event and its count back from :func:`event_json` (plain data, checked)."""
    from securevfl.errors import ConfigError
    from securevfl.privacy.event_lines import event_from_line

    try:
        return event_from_line(doc)
    except ConfigError as exc:
        raise DataError(f"a checkpoint's release must be a known event: {exc}") from None


class PrivateResume:
    """One trainer's checkpointed privacy state: ledger events, write-ahead log, hook state.

    ``hooks`` provide ``checkpoint_state(ctx, k) -> (arrays, counts)``,
    ``restore_checkpoint(ctx, k, arrays, counts, replay)``, ``epoch_releases`` and
    ``eval_releases``; ``parties`` are the local parties that write checkpoints."""

    def __init__(self, ck: Any, ctx: Any, hooks: Any, ledger: Any, parties: list[int]) -> None:
        from securevfl.context import has_budget, noise_seed

        self.ck, self.ctx, self.hooks, self.ledger, self.parties = ck, ctx, hooks, ledger, parties
        # the noise is drawn from --seed (reproduction mode): a re-run stage re-sends its messages
        self.replay = ctx.audit is None and noise_seed(ctx.spec) is not None
        self.marks = self._marks()
        self.resumed: dict[str, Any] | None = None
        if not ck.resume:  # a fresh run: its log starts empty
            for k in parties:
                (ck.root / f"party_{k}").mkdir(parents=True, exist_ok=True)
                self._log(k).write_text("")
        # every earlier run on this directory released its centring means and (a csv run
        # without --bounds) its DP scaling ranges, both drawn before the trainer starts, and
        # trained on them: under the CSPRNG each is a release of its own
        centred = bool(ctx.spec.center) and has_budget(ctx.spec)
        ranged = bool(getattr(ctx.info, "dp_bounds", ()))
        starts = sum(x == "start" for x in self.lines(parties[0])) if ck.resume else 0
        self.earlier = starts if (centred or ranged) else 0
        self.mark("start")

    def _log(self, k: int) -> Any:
        return self.ck.root / f"party_{k}" / "started.log"

    def _accounts(self) -> dict[str, Any]:
        if self.ledger is None:
            return {}
        led = self._ledgers()[0]  # a tee's first ledger is the run's total
        return {**{str(p): a for p, a in led.parties.items()}, "sample": led.sample}

    def _ledgers(self) -> tuple:
        return getattr(self.ledger, "ledgers", (self.ledger,))

    def _marks(self) -> dict[str, int]:
        return {name: len(a.log) for name, a in self._accounts().items()}

    def lines(self, k: int) -> list[str]:
        """Party k's whole log lines (a line cut by a kill was written before its release, so
        that release never happened: it is dropped)."""
        path = self._log(k)
        text = path.read_text() if path.is_file() else ""
        whole = text.split("\n")[:-1]  # what follows the last newline was cut by a kill
        return [x for x in whole if _LINE.fullmatch(x)]

    def mark(self, line: str) -> None:
        """Append ``line`` to every local party's log, durably, before the stage releases."""
        for k in self.parties:
            fd = os.open(self._log(k), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, f"{line}\n".encode())
                os.fsync(fd)
            finally:
                os.close(fd)

    def state(self, k: int) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Party k's arrays and the public facts its checkpoint adds (events, log, counts)."""
        arrays, counts = self.hooks.checkpoint_state(self.ctx, k)
        events = {
            name: [event_json(ev, n) for ev, n in a.log[self.marks.get(name, 0) :]]
            for name, a in self._accounts().items()
        }
        doc = {"releases": events, "logged": len(self.lines(k)), "counts": counts}
        return {f"hooks.{n}": a for n, a in arrays.items()}, {"privacy": doc}

    def restore(self, docs: dict[int, dict], arrays: dict[int, dict[str, np.ndarray]]) -> None:
        """Put the checkpoint's releases into the ledger and its state into the hooks; compose
        what the log says was released after it (see the module docstring)."""
        for k, doc in docs.items():
            priv = doc.get("privacy")
            if not isinstance(priv, dict):
                raise DataError(f"checkpoint of party {k} must hold the run's releases, got none")
            own = {n[len("hooks.") :]: a for n, a in arrays[k].items() if n.startswith("hooks.")}
            self.hooks.restore_checkpoint(self.ctx, k, own, dict(priv["counts"]), self.replay)
        k0 = min(docs)
        priv = docs[k0]["privacy"]
        if self.ledger is not None:
            for name, events in priv["releases"].items():
                party = None if name == "sample" else int(name)
                for e in events:
                    ev, n = event_of(e)
                    self.ledger.compose(party, ev, n, sample=party is None)
        later = self.lines(k0)[int(priv["logged"]) :]
        epochs = [int(x.split()[1]) for x in later if x.startswith("epoch")]
        evals = sum(x == "eval" for x in later)
        if not self.replay and self.ledger is not None:
            for e in epochs:
                self._compose(self.hooks.epoch_releases(self.ctx, e))
            for _ in range(evals):
                self._compose(self.hooks.eval_releases(self.ctx, self.ctx.info.n_test))
        self.resumed = {
            "checkpoint_epoch": int(docs[k0]["epoch"]),
            "epochs_re_released": len(epochs),
            "scorings_re_released": evals,
            "centrings_re_released": self.earlier,
            "counted_twice": not self.replay,
        }
        self.ck.centrings_again = 0 if self.replay else self.earlier
        self.hooks.resumed = self.resumed
        if self.ledger is not None:
            for led in self._ledgers():
                led.notes["resumed"] = self.resumed

    def _compose(self, releases: Any) -> None:
        for party, event in releases:
            self.ledger.compose(party, event)

    def warning(self) -> str | None:
        """The one line a resume that counted stages twice prints (None otherwise)."""
        r = self.resumed
        if r is None or not r["counted_twice"]:
            return None
        keys = ("epochs_re_released", "scorings_re_released", "centrings_re_released")
        if not any(r[key] for key in keys):
            return None  # killed right after a checkpoint: nothing was sent twice
        return (
            f"resumed from epoch {r['checkpoint_epoch']} with fresh noise: "
            f"{r['epochs_re_released']} epoch(s), {r['scorings_re_released']} scoring(s) and "
            f"{r['centrings_re_released']} "
            "centring(s) released before the kill run again, both releases are composed, so "
            "epsilon exceeds the target"
        )


class ResumableHooks:
    """A trainer's hooks as a checkpoint sees them: the trainer's own base class (which sets
    ``resumable_as_is``) resumes as it is; a method's hooks refuse unless they keep their state
    through ``checkpoint_state`` / ``restore_checkpoint`` and override ``checkpoint_refusal``."""

    resumed: dict[str, Any] | None = None  # set on resume (``privacy.resumed``)

    def checkpoint_refusal(self, ctx: Any) -> str | None:
        """Why a checkpoint cannot resume these hooks (None: it can)."""
        return None if "resumable_as_is" in type(self).__dict__ else STATEFUL

    def checkpoint_state(self, ctx: Any, k: int) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Party k's own state to keep: arrays and public counts (never a noise key)."""
        return {}, {}

    def restore_checkpoint(
        self, ctx: Any, k: int, arrays: dict[str, np.ndarray], counts: dict[str, Any], replay: bool
    ) -> None:
        """Put party k's saved state back; ``replay``: the noise is from --seed (skip ahead)."""


def private_resume(
    ck: Any, ctx: Any, hooks: Any, ledger: Any, parties: list[int], stats: Any
) -> PrivateResume:
    """The run's :class:`PrivateResume`, restored from the checkpoint when resuming (its
    warning, if any, goes to the record's warnings)."""
    guard = PrivateResume(ck, ctx, hooks, ledger, parties)
    if ck.resume:
        got = {k: ck.load(k) for k in parties}
        guard.restore({k: g[0] for k, g in got.items()}, {k: g[1] for k, g in got.items()})
        line = guard.warning()
        if line is not None:
            stats.warnings.append(line)
    return guard


class CountedNormals:
    """A noise generator that counts the normals drawn from it: the position a checkpoint
    keeps (a count, never the generator's key). Only ``normal`` and ``standard_normal`` are
    offered, so a draw the count would miss fails loudly instead of desynchronising a resume."""

    def __init__(self, rng: Any) -> None:
        self.rng, self.drawn = rng, 0

    def normal(self, loc: Any = 0.0, scale: Any = 1.0, size: Any = None) -> Any:
        out = self.rng.normal(loc, scale, size)
        self.drawn += int(np.size(out))
        return out

    def standard_normal(self, size: Any = None, **kw: Any) -> Any:
        out = self.rng.standard_normal(size, **kw)
        self.drawn += int(np.size(out))
        return out

    def skip(self, n: int) -> None:
        """Continue as a generator that has drawn ``n`` normals (a seeded one, resumed)."""
        skip_normals(self.rng, n)
        self.drawn = n
