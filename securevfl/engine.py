"""Where a party computes on its own rows: in its process (numpy) or on its Dask cluster.

``--engine dask`` (hdp-vfl, fm-vfl, secureboost): each party's block becomes a Dask array of row
blocks held on that party's own cluster (a ``LocalCluster`` of up to 2 worker processes the
party starts, ``local_workers``; or the scheduler at ``--dask-scheduler ADDRESS``), and the GLM
products it computes on its own rows run there: X w and its test scores blockwise, Xᵀ g, Xᵀ X
and Xᵀ v as tree reductions over the blocks. ``secureboost`` and ``secureboost-dp`` run their
Paillier arithmetic there (``methods.secureboost_dask``): the label holder's encryption over row
blocks, with every tree's randomness computed ahead, and a data party's encrypted bin sums
over column groups.
The protocol between parties (what is sent, the noise, MPC, the wire) is unchanged:
what a party sends is computed from these results exactly as on the numpy path. Sums associate
differently over blocks, so the results agree with numpy to float rounding, not bit for bit
(secureboost's exact integer arithmetic gives the same trees).

With a ``parquet:`` source (hdp-vfl, fm-vfl, he-vfl) the table never enters the party process: it is
read, encoded and scaled block by block on the cluster whenever a product needs it
(:mod:`securevfl.data.resident`; a view's X_train/X_test is then an
:class:`~securevfl.data.resident.EngineRows`), and each product is one pass over the blocks
(all n rows: X w is brought back block by block and gathered at the view's positions, Xᵀ g
scatters g to them and ships its slices a wave of blocks at a time), so a worker holds one
block per thread (and a wave's slices of g) whatever n; fm-vfl's secure product reads its
input from the engine block by block (:mod:`securevfl.runtime.engine_stream`). Other sources: the
party reads, encodes and holds its block in its own process and the cluster holds one more
copy, persisted in blocks of :data:`BLOCK_ROWS` rows; fm-vfl's secure product takes the whole
block as its MPC input. A minibatch (at most :data:`GATHER_ROWS` rows and a quarter of the
view) is not a pass: its rows come into the party process (:meth:`DaskEngine.rows`; of a table
on the engine, only those rows, taken on the workers, several planned minibatches a pass:
:class:`RowGather`) and X w, Xᵀ g are products on them. he-vfl encodes those rows into its
plaintexts and plans each epoch's minibatches; hdp-vfl's default is one full batch per epoch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import uuid
import warnings
from typing import Any

import numpy as np

from securevfl.errors import ConfigError, ProtocolError

ENGINES = ("numpy", "dask")
# local work on the engine
ENGINE_METHODS = ("hdp-vfl", "fm-vfl", "he-vfl", "secureboost", "secureboost-dp")
BACKGROUND_METHODS = ("secureboost", "secureboost-dp")  # the key holder's engine computes ahead
BLOCK_ROWS = 131_072  # rows per block: at d = 40, 40 MiB of float64
LOCAL_WORKERS = 2  # at most, per party's LocalCluster (``local_workers``: fewer on few cores)
CONNECT_TIMEOUT_S = 60
WAIT_S = 120.0  # the longest wait for one result of the party's cluster (the run's --timeout)
WAVE_BLOCKS = (
    16  # Xᵀ g of a table on the engine: blocks whose slices of g are on the workers at once
)
# A LocalCluster's own upkeep, turned down: the workers' statistical profiler (every 10 ms), the
# event-loop tick (20 ms) and the system monitor (500 ms, GIL sampling included) cost an idle
# cluster of 2 workers 1.08 CPU-s per worker and 1.4 in the party process (its scheduler) every
# 30 s; with these, 0.36 and 0.70 (measured once, the machine at a load average of about 15).
QUIET = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.admin.system-monitor.gil.enabled": False,
}


@dataclasses.dataclass(frozen=True)
class EngineRows:
    """Rows ``rows`` (positions, in that order) of a party's table held lazily on its engine.

    ``table``: a Dask array of every row of the party's encoded table, one chunk per block.
    It stands where a view's X_train/X_test is an array; the engine's products take it
    (:class:`securevfl.engine.DaskEngine`) and nothing indexes it in the party process."""

    table: Any
    rows: np.ndarray
    engine: Any
    # (block, its rows' positions in it) -> a task giving only those rows, each computed
    # alone (a Parquet table: encoded and scaled after the take); None: taken from the block
    take: Any = None

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.rows), int(self.table.shape[1]))

    ndim = 2
    dtype = np.dtype(np.float64)

    def __len__(self) -> int:
        return len(self.rows)

    def map_rows(self, fn: Any, width: int) -> EngineRows:
        """The same rows with ``fn`` (a row-wise map to ``width`` columns) applied to every
        block of the table on the workers, when a computation reads it."""
        table = self.table if self.table.numblocks[1] == 1 else self.table.rechunk({1: -1})
        chunks = (table.chunks[0], (width,))
        mapped = table.map_blocks(fn, chunks=chunks, dtype=np.float64)
        return dataclasses.replace(self, table=mapped, take=None)

    def with_constant(self) -> EngineRows:
        """The same rows with a constant column of ones appended (a clipped intercept)."""
        import dask.array as da

        ones = da.ones((self.table.shape[0], 1), chunks=(self.table.chunks[0], 1))
        table = da.concatenate([self.table, ones], axis=1).rechunk({1: -1})
        return dataclasses.replace(self, table=table, take=None)


# rows of a table on the engine one gather brings into the party process at most (a
# minibatch and the planned ones after it): a block's worth, 40 MiB of float64 at d = 40 (each
# wave is a pass over the blocks: at 1M rows, 7 an epoch where 32,768 rows made 25)
GATHER_ROWS = BLOCK_ROWS


def small(batch: int, view: int) -> bool:
    """Whether a minibatch of ``batch`` of a view's ``view`` rows is gathered for its products:
    at most :data:`GATHER_ROWS` rows and a quarter of the view (a larger one is a pass)."""
    return batch <= min(GATHER_ROWS, view // 4)


class RowGather:
    """A minibatch's rows brought into the party process from its table on the engine.

    HE-VFL encodes each minibatch's rows into plaintexts, so a party whose table stays on its
    engine (:class:`EngineRows`) needs those rows in its process; a minibatch's products (X w,
    Xᵀ g) are then cheaper on the rows alone than as a pass over every block. A gather is a
    task per block that holds any of the rows: it computes those rows on a worker (a Parquet
    table, :attr:`EngineRows.take`: the block read, the rows taken, then encoded; else the
    block computed, the rows taken) and returns only them, assembled here in the minibatch's
    order. The minibatch order is public
    (the shared seed), so a party may :meth:`plan` an epoch's minibatches: a gather (a wave)
    then brings the asked one and the planned ones after it, up to :data:`GATHER_ROWS` rows and
    a quarter of the view, in one pass, and the next wave is computed on the workers while the
    party works on this one. So an epoch costs about n_train / GATHER_ROWS passes, not one a
    minibatch, off the critical path, and the party holds at most two waves of its rows (never
    all of them). ``client``: the party's cluster."""

    def __init__(self, client: Any, timeout: float = WAIT_S) -> None:
        self.client, self.timeout = client, timeout
        # per table (its Dask name): the planned minibatches' table positions, and where each
        # one is in the plan by its key
        self._plans: dict[str, tuple[list[np.ndarray], dict[bytes, int]]] = {}
        self._held: dict[bytes, np.ndarray] = {}  # the last wave's rows, by key
        self._next: tuple[bytes, _Wave] | None = None  # the wave on its way, by its first key

    def plan(self, X: Any, batches: list[np.ndarray]) -> None:
        """The view ``X``'s minibatches (indices of its rows) asked for next, in order; the
        first wave starts on the workers now."""
        wave = [np.asarray(X.rows[i], dtype=np.int64) for i in batches]
        self._plans[X.table.name] = (wave, {_key(X.table, p): j for j, p in enumerate(wave)})
        self._next = self._start(X, 0) if wave else None

    def rows(self, X: Any, idx: np.ndarray) -> np.ndarray:
        """X[idx] (read-only), in the minibatch's order: held from the last wave, else the
        wave on its way or a new one that starts with it."""
        pos = np.asarray(X.rows[idx], dtype=np.int64)
        key = _key(X.table, pos)
        hit = self._held.get(key)
        if hit is None:
            self._held = {}  # the last wave's rows go before the next come in
            planned, where = self._plans.get(X.table.name, ([], {}))
            first = where.get(key)
            if self._next is not None and self._next[0] == key:  # on its way
                wave = self._next[1]
            elif first is not None:
                wave = self._start(X, first)[1]
            else:  # not planned: this minibatch alone
                wave = _Wave(self.client, X, [pos])
            got = wave.result(self.timeout)
            self._next = None
            self._held = {_key(X.table, p): r for p, r in got}
            if first is not None and first + len(got) < len(planned):
                self._next = self._start(X, first + len(got))
            hit = self._held[key]
        return hit

    def clear(self) -> None:
        self._plans.clear()
        self._held, self._next = {}, None

    def _start(self, X: Any, first: int) -> tuple[bytes, _Wave]:
        """The wave of planned minibatches from ``first`` on, started on the workers."""
        planned = self._plans[X.table.name][0]
        budget = max(len(planned[first]), min(GATHER_ROWS, len(X) // 4))
        end, taken = first + 1, len(planned[first])
        while end < len(planned) and taken + len(planned[end]) <= budget:
            taken += len(planned[end])
            end += 1
        return _key(X.table, planned[first]), _Wave(self.client, X, planned[first:end])


class _Wave:
    """The table's rows at each array of positions in ``wave``, from one pass over the blocks
    of ``X`` (an EngineRows) that hold any of them: a task per such block, started on
    ``client`` at once."""

    def __init__(self, client: Any, X: Any, wave: list[np.ndarray]) -> None:
        from dask import delayed

        table = X.table
        if table.numblocks[1] > 1:  # one block of rows, every column
            table = table.rechunk({1: -1})
        self.wave, self.width = wave, int(table.shape[1])
        pos = np.concatenate(wave)
        self.order = np.argsort(pos, kind="stable")
        ordered = pos[self.order]
        starts = np.cumsum((0, *table.chunks[0]))
        cut = np.searchsorted(ordered, starts)  # block i holds ordered[cut[i] : cut[i + 1]]
        blocks = table.to_delayed().ravel()
        hit = [i for i in range(len(blocks)) if cut[i + 1] > cut[i]]
        self.spans = [(cut[i], cut[i + 1]) for i in hit]
        take = X.take or (lambda i, local: delayed(_take)(blocks[i], local))
        tasks = [take(i, ordered[cut[i] : cut[i + 1]] - starts[i]) for i in hit]
        self.futures = client.compute(tasks)

    def result(self, timeout: float) -> list[tuple[np.ndarray, np.ndarray]]:
        """(positions, rows) of each minibatch of the wave, the rows read-only (each block's
        slice waited for at most ``timeout`` seconds)."""
        out = np.empty((sum(len(p) for p in self.wave), self.width), dtype=np.float64)
        for (a, b), fut in zip(self.spans, self.futures, strict=True):
            out[self.order[a:b]] = wait_for(fut, timeout, "a minibatch's rows")
        out.flags.writeable = False  # held for the minibatch's later products
        parts = np.split(out, np.cumsum([len(p) for p in self.wave])[:-1])
        return list(zip(self.wave, parts, strict=True))


def wait_for(fut: Any, timeout: float, what: str) -> Any:
    """``fut``'s result, waited for at most ``timeout`` seconds (else a ProtocolError naming
    ``what``); the future is released either way."""
    try:
        return fut.result(timeout=timeout)
    except TimeoutError:
        raise ProtocolError(
            f"the party's Dask cluster did not deliver {what} within {timeout:g} s (--timeout; "
            f"a worker may have died or the cluster be overloaded)"
        ) from None
    finally:
        fut.release()


def wait_all(futures: list[Any], timeout: float, what: str) -> list[Any]:
    """Each future's result in order, each waited for at most ``timeout`` (:func:`wait_for`)."""
    return [wait_for(f, timeout, what) for f in futures]


def _take(block: np.ndarray, local: np.ndarray) -> np.ndarray:
    """The block's rows at ``local`` (on a worker: only these travel)."""
    return np.ascontiguousarray(block[local])


def _key(table: Any, pos: np.ndarray) -> bytes:
    """Rows by their table (its Dask name) and positions: a 16-byte digest."""
    name = hashlib.blake2b(table.name.encode(), digest_size=16).digest()
    return hashlib.blake2b(pos.tobytes(), digest_size=16, key=name).digest()


class NumpyEngine:
    """The party's products in its own process (the default)."""

    name = "numpy"

    def matvec(self, X: np.ndarray, w: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """X[idx] w (all rows when ``idx`` is None)."""
        return (X if idx is None else X[idx]) @ w

    def rmatvec(self, X: np.ndarray, g: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        """X[idx]ᵀ g."""
        return (X if idx is None else X[idx]).T @ g

    def gram(self, X: np.ndarray) -> np.ndarray:
        """Xᵀ X."""
        return X.T @ X

    def rows(self, X: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """X[idx] as an array in this process (a minibatch's rows, in the minibatch's order)."""
        return np.asarray(X)[idx]

    def plan(self, X: Any, batches: list[np.ndarray]) -> None:
        """The minibatches (row indices of X, in order) whose :meth:`rows` are asked for next:
        an engine may bring several in with one pass over its blocks (numpy: nothing to do)."""

    def stats(self) -> dict[str, Any]:
        return {"engine": self.name}

    def close(self) -> None:
        pass


NUMPY = NumpyEngine()


class DaskEngine(NumpyEngine):
    """The party's products as Dask reductions over row blocks on its own cluster."""

    name = "dask"

    def __init__(
        self,
        scheduler: str | None = None,
        *,
        workers: int = LOCAL_WORKERS,
        block_rows: int = 0,
        timeout: float = WAIT_S,
    ) -> None:
        from distributed import Client, LocalCluster

        self.block_rows = block_rows or BLOCK_ROWS
        self.timeout = float(timeout)  # every wait for the cluster's results, at most
        self.cluster = None
        if scheduler:
            try:
                self.client = Client(scheduler, timeout=CONNECT_TIMEOUT_S)
            except OSError as exc:
                raise ConfigError(
                    f"--dask-scheduler must be a reachable Dask scheduler, got {scheduler!r}: "
                    f"{exc}"[:300]
                ) from None
        else:
            import logging

            # the scheduler runs in this process: its INFO lines would bury the run's output
            logging.getLogger("distributed").setLevel(logging.ERROR)
            import dask

            with dask.config.set(QUIET):
                self.cluster = LocalCluster(
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=":0",  # no fixed port: several parties on one host
                    silence_logs=logging.ERROR,
                )
            self.client = Client(self.cluster)
        self._blocks: dict[int, tuple[np.ndarray, Any]] = {}
        # minibatches' rows of tables on the engine
        self.gathered = RowGather(self.client, self.timeout)

    def blocks(self, X: np.ndarray) -> Any:
        """X as a Dask array of row blocks held on the cluster (made once per block)."""
        import dask.array as da

        hit = self._blocks.get(id(X))
        if hit is None or hit[0] is not X:
            # a name of its own: two equal blocks would otherwise share (and release) keys
            name = f"party-block-{uuid.uuid4().hex}"
            arr = da.from_array(np.asarray(X), chunks=(self.block_rows, X.shape[1]), name=name)
            with warnings.catch_warnings():  # shipping the party's own block is the point
                warnings.filterwarnings("ignore", "Large object", UserWarning)
                hit = (X, self.client.persist(arr))
            self._blocks[id(X)] = hit
        return hit[1]

    def _result(self, expr: Any) -> np.ndarray:
        """``expr`` computed on this party's own cluster (never Dask's default client: in one
        process, each party has its own client)."""
        return np.asarray(wait_for(self.client.compute(expr), self.timeout, "a product"))

    def gather(self, tasks: list[Any], what: str) -> list[Any]:
        """The results of ``tasks`` (Dask delayed objects) computed on this party's cluster,
        each waited for at most the timeout."""
        return wait_all(self.client.compute(list(tasks)), self.timeout, what)

    def _vector(self, expr: Any) -> np.ndarray:
        """A row-chunked Dask vector brought into this process block by block: each block's
        values are written into one array as they arrive, so no worker assembles (and holds)
        the whole n-vector and the party holds it once."""
        starts = np.cumsum((0, *expr.chunks[0]))
        futures = self.client.compute(list(expr.to_delayed().ravel()))
        out = np.empty(expr.shape[0], dtype=expr.dtype)
        # in block order (distributed's as_completed waited ~0.4 s a call between blocks)
        for i, fut in enumerate(futures):
            out[starts[i] : starts[i + 1]] = wait_for(fut, self.timeout, f"block {i} of a product")
        return out

    def matvec(self, X: Any, w: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        if idx is not None and small(len(idx), len(X)):  # a minibatch: its rows, not a pass
            return self.rows(X, idx) @ np.asarray(w)
        if isinstance(X, EngineRows):  # every row's score, then the view's positions
            pos = X.rows if idx is None else X.rows[idx]  # one gather: no n-vector between
            return self._vector(X.table @ np.asarray(w))[pos]
        z = self._vector(self.blocks(X) @ np.asarray(w))
        return z if idx is None else z[idx]

    def rmatvec(self, X: Any, g: np.ndarray, idx: np.ndarray | None = None) -> np.ndarray:
        if idx is not None and small(len(idx), len(X)):  # the rows matvec gathered: no pass
            return self.rows(X, idx).T @ np.asarray(g)
        if isinstance(X, EngineRows):  # g at the view's rows of the whole table, 0 elsewhere
            pos = X.rows if idx is None else X.rows[idx]
            # g at the table's positions: one n-vector, shipped to the workers a wave at a time
            return self._rmatvec_blocks(
                X.table, np.bincount(pos, weights=g, minlength=len(X.table))
            )
        if idx is not None:  # the minibatch's rows as a full-length vector (zeros elsewhere)
            full = np.zeros(X.shape[0])
            np.add.at(full, idx, g)
            g = full
        return self._result(self.blocks(X).T @ np.asarray(g))

    def gram(self, X: Any) -> np.ndarray:
        if isinstance(X, EngineRows):  # the view's rows only: a 0/1 weight per row
            mask = np.bincount(X.rows, minlength=X.table.shape[0]).astype(np.float64)
            m = self._column(mask, X.table.chunks[0])
            return self._result((X.table * m[:, None]).T @ X.table)
        A = self.blocks(X)
        return self._result(A.T @ A)

    def rows(self, X: Any, idx: np.ndarray) -> np.ndarray:
        """X[idx] in this process, in the minibatch's order; of a table on the engine only
        those rows are taken on the workers, with the planned minibatches after them
        (:class:`RowGather`)."""
        if isinstance(X, EngineRows):
            return self.gathered.rows(X, idx)
        return np.asarray(X)[idx]  # the party holds its rows: nothing to gather

    def plan(self, X: Any, batches: list[np.ndarray]) -> None:
        if isinstance(X, EngineRows):
            self.gathered.plan(X, batches)

    def _rmatvec_blocks(self, table: Any, full: np.ndarray) -> np.ndarray:
        """tableᵀ full as each block's product with its slice of ``full``, summed here in
        block order. The slices are scattered to the workers :data:`WAVE_BLOCKS` blocks at a
        time (not embedded in a task graph, which the in-process scheduler would hold as a
        second copy of the n-vector; not all at once, which would put n/workers of it on
        each worker)."""
        from dask import delayed

        if table.numblocks[1] > 1:  # one block of rows, every column
            table = table.rechunk({1: -1})
        starts = np.cumsum((0, *table.chunks[0]))
        blocks = table.to_delayed().ravel()
        got = []
        for first in range(0, len(blocks), WAVE_BLOCKS):  # a worker holds a wave's slices
            wave = range(first, min(len(blocks), first + WAVE_BLOCKS))
            with warnings.catch_warnings():  # shipping the party's own vector is the point
                warnings.filterwarnings("ignore", "Large object", UserWarning)
                held = self.client.scatter(
                    [full[starts[i] : starts[i + 1]] for i in wave], hash=False
                )
            tasks = [delayed(_transposed_product)(blocks[i], v) for i, v in zip(wave, held)]
            got += self.gather(tasks, "blocks of a transposed product")
            del held
        return np.sum(np.stack(got), axis=0)

    @staticmethod
    def _column(v: np.ndarray, chunks: tuple[int, ...]) -> Any:
        """A party's n-vector as a Dask array chunked like its table's rows."""
        import dask.array as da

        name = f"party-vector-{uuid.uuid4().hex}"  # not a hash of n values
        with warnings.catch_warnings():  # shipping the party's own vector is the point
            warnings.filterwarnings("ignore", "Large object", UserWarning)
            return da.from_array(v, chunks=(chunks,), name=name)

    def stats(self) -> dict[str, Any]:
        """The engine, its workers and each worker's peak resident memory (MiB)."""

        def peak_mib() -> float:  # VmHWM, as runtime.resources.peak_rss_bytes (see there)
            with open("/proc/self/status") as f:
                hwm = next((ln for ln in f if ln.startswith("VmHWM:")), "VmHWM: 0 kB")
            return int(hwm.split()[1]) / 1024

        try:
            peaks = self.client.run(peak_mib)
        except Exception:  # a remote scheduler may refuse client.run: the figures are extras
            peaks = {}
        return {
            "engine": self.name,
            "workers": len(peaks),
            "block_rows": self.block_rows,
            "worker_peak_rss_mib": sorted(round(v, 1) for v in peaks.values()),
        }

    def close(self) -> None:
        self._blocks.clear()
        self.gathered.clear()
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def _transposed_product(block: np.ndarray, v: np.ndarray) -> np.ndarray:
    """blockᵀ v (on a worker)."""
    return block.T @ v


def open_engines(
    spec: Any,
    parties: list[int],
    views: dict[int, Any] | None = None,
    key_holder: int | None = None,
) -> dict[int, NumpyEngine]:
    """Each local data party's engine for this run (the numpy one unless ``--engine dask`` and
    the method runs on it; other methods say so in one line and run in one process). A party
    whose table already lives on its engine (``views``: an EngineRows) keeps that engine.
    ``key_holder``: the party whose engine computes ahead in the background
    (``BACKGROUND_METHODS``): it gets ``local_workers(1)``, the other parties
    ``local_workers`` of their own count (on 2 cores with one partner: 2 workers each)."""
    held = {
        k: v.X_train.engine
        for k, v in (views or {}).items()
        if isinstance(getattr(v, "X_train", None), EngineRows)
    }
    if held:
        return held
    engine = getattr(spec, "engine", None) or "numpy"
    if engine not in ENGINES:
        raise ConfigError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "numpy" or not parties:
        return {}
    if spec.method not in ENGINE_METHODS:
        print(
            f"securevfl: note: {spec.method} runs each party's local work in one process "
            f"(--engine dask serves {', '.join(ENGINE_METHODS)})",
            file=sys.stderr,
        )
        return {}
    scheduler = getattr(spec, "dask_scheduler", None)
    background = key_holder if spec.method in BACKGROUND_METHODS else None
    # a party computing ahead in the background gets the cores of a party alone; the others
    # share them among themselves (the background takes what they leave idle)
    workers = local_workers(len(parties) - (background in parties))
    return {
        k: DaskEngine(
            scheduler,
            workers=local_workers(1) if k == background else workers,
            timeout=getattr(spec, "timeout", WAIT_S),
        )
        for k in parties
    }


def local_workers(parties: int) -> int:
    """Worker processes per party's LocalCluster: ``LOCAL_WORKERS``, fewer where the parties of
    this process would together start more workers than it may use cores.

    Why: more processes than cores buy no parallelism, only switches between them; SecureBoost
    at 10,000 rows (2 parties, 2 cores) took 59.9 CPU-s and 67.5 s to train with 2 workers a
    party, 44.6 CPU-s and 34.4 s with 1 (docs/benchmarks.md "SecureBoost").

    The one exception (``open_engines``): a party of ``BACKGROUND_METHODS`` whose engine work
    is computed ahead of need at a lower CPU priority (SecureBoost's key holder: the
    encryption randomness of every tree, ``secureboost_dask.BACKGROUND_NICE``) gets the
    workers of a party alone, ``local_workers(1)``: its tasks take the cores the other
    parties' work leaves idle (their workers keep the priority), and all of them where the
    others wait for it (the first tree's encryption). The other parties then count only
    themselves (``local_workers(parties - 1)``): on 2 cores the one partner gets 2 workers, so
    its sums take both cores where no randomness is left to compute (the last tree), where
    with 1 worker the run's last seconds used one core."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform
        cores = os.cpu_count() or 1
    return max(1, min(LOCAL_WORKERS, cores // max(1, parties)))


def close_engines(engines: dict[int, NumpyEngine]) -> dict[str, Any] | None:
    """Close the engines; their statistics (per party) for the record, None if numpy."""
    if not engines:
        return None
    out = {str(k): e.stats() for k, e in engines.items()}
    for e in engines.values():
        e.close()
    return out
