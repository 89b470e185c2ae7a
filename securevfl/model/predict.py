"""Score new rows with a saved model: each party prepares and scores its own columns.

A party prepares a raw row the way training did (a CSV's saved encoder: its columns by name,
categories, blank cells and their indicators; its card's scaling ranges, centring, the public
row-norm bound), computes its message (``X_k w_k`` for a linear model, its bottom's
embedding for a split-NN) and sends it to the label holder, which adds the bias or runs the head.
The same SPMD code runs on any runtime, so the bytes each party sends are metered. Rows given as
per-party CSVs keyed by an ID column are first aligned by PSI (:mod:`securevfl.data.alignment`).

What scoring releases: each data party's message for every scored row goes to the label
holder exactly as at the training run's test scoring: in the clear for a plain path (no ε covers
the scored rows; the training ε in the card covers the training rows), or, for a method whose
scoring is a noisy release (``meta.release``: ldp-vfl, afe-vfl, vafl-dp; pbm-vfl's PBM +
secure aggregation in ``securevfl.model.predict_pbm``), through the same mechanism with fresh noise,
its ε per scored row accounted (``securevfl.model.predict_privacy``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from securevfl.data.csv_columns import ColumnRule
from securevfl.data.preprocess import scale_by_ranges
from securevfl.data.saved_encoder import rules_from_json
from securevfl.errors import DataError
from securevfl.model.files import ModelFileError, Part, load_parts
from securevfl.model.layers import rebuild_layers
from securevfl.model.predict_head import linear_input, link, network_head
from securevfl.model.predict_pbm import pbm_release, score_pbm
from securevfl.model.predict_privacy import PLAIN_RELEASE, apply_release, scoring_privacy
from securevfl.model.predict_rows import kept_rows, per_row, read_encoded, test_split_blocks
from securevfl.model.predict_trees import own_tree_offsets, score_trees
from securevfl.models.tree_arrays import PREFIX as TREES_PREFIX
from securevfl.runtime.base import Runtime
from securevfl.runtime.expect import Expect
from securevfl.runtime.inprocess import InProcessRuntime

SCORING_RELEASE = PLAIN_RELEASE  # the plain path's release (kept under its old name)


@dataclass
class Prediction:
    """Scores at the label holder: ``scores`` as training reported them (P(y=1), class
    probabilities, or the regression value), ``classes`` the predicted class labels."""

    ids: list[str] | None
    classes: np.ndarray
    scores: np.ndarray
    record: dict[str, Any]


class Model:
    """A saved model's parts (those loaded in this process) and how they score rows.

    ``noise_seed``: where a part's message is a noisy release (``meta.release``), its noise
    comes from the AES-CTR CSPRNG (None, the default) or, in the reproduction mode, from this
    seed (the noise then protects nothing: the record says so)."""

    def __init__(self, parts: dict[int, Part], *, noise_seed: int | None = None) -> None:
        self.parts = parts
        self.noise_seed = noise_seed
        self._rngs: dict[int, Any] = {}
        any_card = next(iter(parts.values())).card
        self.method = any_card["method"]
        self.kind = any_card["kind"]
        self.label_party = int(any_card["label_party"])
        self.data_parties = int(any_card["data_parties"])
        self.n_parties = int(any_card["n_parties"])
        self.task = any_card["task"]
        head = parts.get(self.label_party)
        self.pooled = bool(head is not None and head.meta.get("pooled"))
        self.bound_sq = float(any_card["preprocessing"]["row_norm_bound_sq"])
        self.scoring = [int(k) for k in any_card.get("scoring_parties", range(self.data_parties))]

    @property
    def card(self) -> dict[str, Any]:
        """The label holder's card (or any loaded part's)."""
        return (self.parts.get(self.label_party) or next(iter(self.parts.values()))).card

    def columns(self, k: int) -> dict[str, Any]:
        """Data party ``k``'s column record (names, order, scaling)."""
        if self.pooled:
            return self.parts[self.label_party].card["pooled_columns"][k]
        if k not in self.parts:
            raise ModelFileError(
                f"model must hold party {k}'s part, got parties {sorted(self.parts)}"
            )
        return self.parts[k].card["columns"]

    def scoring_privacy(self) -> dict[str, Any]:
        """What scoring released and its ε per scored row (``predict_privacy``)."""
        senders = [k for k in self.scoring if k != self.label_party]
        return scoring_privacy(
            self.parts,
            senders=len(senders),
            noise_seed=self.noise_seed,
            training=self.card.get("privacy"),
        )

    def check_complete(self) -> None:
        """In-process scoring needs every party's part (a pooled model: the label holder's)."""
        need = [self.label_party] if self.pooled else sorted({*self.scoring, self.label_party})
        missing = [k for k in need if k not in self.parts]
        if missing:
            raise ModelFileError(
                f"model must hold the parts of parties {need} to score in one process, "
                f"missing {missing}"
            )

    # -- preparing rows -------------------------------------------------------------------
    def rules(self, k: int) -> list[ColumnRule]:
        """Data party ``k``'s encoder: a CSV model's saved rules (checked when loaded), else
        each input a numeric column under its card name (a built-in dataset's encoded columns)."""
        cols = self.columns(k)
        if "encoder" in cols:
            return rules_from_json(cols["encoder"], f"party {k}'s model card")
        return [ColumnRule(str(n)) for n in cols["names"]]

    def prepare(self, k: int, raw: np.ndarray) -> np.ndarray:
        """Party ``k``'s raw block (its card's columns, in order) as the model's input."""
        cols = self.columns(k)
        X = np.array(raw, dtype=np.float64, ndmin=2)
        if X.shape[1] != len(cols["indices"]):
            raise DataError(
                f"party {k}'s block must have {len(cols['indices'])} columns "
                f"({cols['names']}), got {X.shape[1]}"
            )
        scaling = cols.get("scaling")
        if np.isinf(X).any():
            raise DataError(f"party {k}'s block must be finite, got inf")
        if scaling is None and np.isnan(X).any():  # NaN is a blank: a csv: model's rule only
            raise DataError(
                f"party {k}'s block must hold no NaN or blank cell (the model was not trained "
                "on CSV files with blanks: it has no rule for them)"
            )
        if scaling is not None:  # a CSV's columns: training's rule (clipped; NaN, a blank: 0)
            # new rows outside the training range are clipped: the row-norm bound still holds
            X = scale_by_ranges(X, scaling)
        for j, c in enumerate(cols.get("center") or []):
            if c is not None:
                X[:, j] = np.clip((X[:, j] - c[0]) / c[1], -1.0, 1.0)
        return np.ascontiguousarray(X / math.sqrt(self.bound_sq))  # C-ordered, as in training

    # -- scoring --------------------------------------------------------------------------
    def message(self, k: int, X: np.ndarray) -> np.ndarray:
        """Party ``k``'s scoring message for its prepared rows ``X``: its linear score, or its
        bottom's embedding (released and compressed as its test scoring was)."""
        part = self.parts[k]
        if self.kind == "linear":
            return linear_input(part.meta, X, head=False) @ part.arrays["w"]
        import torch

        bottom = rebuild_layers(part.meta["bottom_layers"], part.arrays, "bottom.")
        with torch.no_grad():
            emb = bottom(torch.as_tensor(X, dtype=torch.float32)).numpy()
        release = part.meta.get("release")
        if k == self.label_party and part.meta.get("own_message") == "plain":
            release = None  # the label holder's own embedding enters its head as it is
        uplink = part.meta.get("uplink")
        if release is not None:  # the method's own release, as at its test scoring
            released = apply_release(emb, release, self._rng(k))  # float64: clip, noise
            emb = released if uplink is not None else released.astype(np.float32)
        if uplink is not None:  # a cascade client: its compressed message
            return self._compress(k, emb, uplink)
        return emb

    def _compress(self, k: int, emb: np.ndarray, how: Mapping[str, Any]) -> bytes:
        """The bytes a cascade client sends for ``emb``, compressed as its uplink was in
        training (``protocols.compress``; top-k over the whole message, as its test scoring)."""
        from protocols.compress import ROUNDINGS, encode

        n = int(emb.size)
        topk = float(how["topk"])
        k_kept = None if topk >= 1.0 else max(1, int(np.ceil(topk * n)))
        stochastic = bool(how["stochastic"])
        return encode(
            emb.astype(np.float64),
            bits=int(how["bits"]),
            topk=k_kept,
            rounding=ROUNDINGS[stochastic],
            entropy=bool(how["entropy"]),
            clip=bool(how["clip"]),
            rng=self._rng(k) if stochastic else None,
        )

    def _rng(self, k: int) -> Any:
        from securevfl.rng import make_noise_rng

        if k not in self._rngs:
            self._rngs[k] = make_noise_rng(self.noise_seed, purpose="noise/predict", party=k)
        return self._rngs[k]

    def _head(self, own: np.ndarray | None, received: dict[int, Any]) -> np.ndarray:
        part = self.parts[self.label_party]
        meta = part.meta
        if self.kind == "linear":
            theta = linear_input(meta, own, head=True) @ part.arrays["w"] + part.arrays["bias"]
            if received:  # the order of the trainer's own scoring: own, then the passives
                scale = meta.get("passive_scale") or {}  # HDP-VFL's refit: α_k per passive
                theta = theta + sum(
                    float(scale.get(str(k), 1.0)) * received[k] for k in sorted(received)
                )
            if TREES_PREFIX + "leaf" in part.arrays:  # fm-vfl --offset gbdt: its own trees
                clip = bool(meta.get("own_trees"))  # fm-vfl's offsets are clipped log-odds
                theta = theta + own_tree_offsets(part.arrays, own, clip=clip)
            return link(meta["link"], theta)
        return network_head(self, own, received)

    def score(self, blocks: Mapping[int, np.ndarray], rt: Runtime | None = None) -> Any:
        """Scores of prepared blocks (SPMD: each party's message goes to the label holder,
        metered as phase 'predict'); the scores at the label holder, None elsewhere."""
        rt = rt or InProcessRuntime(self.n_parties)
        L = self.label_party
        if self.pooled:  # a pooled baseline: the label holder holds every column
            if not rt.here(L):
                return None
            width = sum(len(self.columns(k)["indices"]) for k in range(self.data_parties))
            X = np.zeros((len(blocks[0]), width))
            for k in range(self.data_parties):
                X[:, self.columns(k)["indices"]] = blocks[k]
            return self._head(X, {})
        if self.kind == "trees":  # secureboost: each row routed through the nodes' owners
            return score_trees(self.parts, L, self.scoring, dict(blocks), rt)
        pbm = pbm_release(self.parts)
        if pbm is not None:  # pbm-vfl: PBM + secure aggregation, as its test rows were scored
            return score_pbm(self, pbm, dict(blocks), rt)
        senders = [k for k in self.scoring if k != L]
        with rt.meter.in_phase("predict"):
            msgs = {k: rt.local(k, self.message, k, blocks.get(k)) for k in senders}
            got = rt.gather(msgs, dst=L, expect=self._message_rule(blocks.get(L)))
        if not rt.here(L):
            return None
        own = blocks.get(L) if L < self.data_parties else None
        return self._head(own, got or {})

    def _message_rule(self, own: np.ndarray | None) -> Expect:
        """What the label holder accepts from a scoring party: a linear part's score of each
        row, else an embedding row per row (a cascade client's as its compressed message);
        the rows are the label holder's own where it holds columns."""
        rows = None if own is None else len(own)
        if self.kind == "linear":
            return Expect("predict messages", shape=(rows,))
        width = int(self.card["spec"]["embedding_dim"])
        return Expect("predict messages", shape=(rows, width), or_packed=True)

    def classify(self, scores: np.ndarray) -> np.ndarray:
        """Class labels of scores (the training labels' values where the card has them)."""
        if self.task == "regression":
            return scores
        idx = (scores >= 0.5).astype(int) if scores.ndim == 1 else scores.argmax(axis=1)
        if scores.ndim == 2 and self.task == "binary":
            idx = (scores[:, 1] >= 0.5).astype(int)
        classes = self.card.get("classes")
        return np.asarray(classes)[idx] if classes else idx

    @staticmethod
    def score_column(scores: np.ndarray, task: str) -> np.ndarray:
        """One number per row: P(class 1) (binary), the top class's probability, the value."""
        if scores.ndim == 1:
            return scores
        return scores[:, 1] if task == "binary" else scores.max(axis=1)

    # -- the three entry points ---------------------------------------------------------------
    def predict(self, blocks: Sequence[np.ndarray] | Mapping[int, np.ndarray]) -> Prediction:
        """Score raw rows given per data party (same rows, same order; card's columns)."""
        self.check_complete()
        if not isinstance(blocks, Mapping):
            blocks = dict(enumerate(blocks))
        if sorted(blocks) != list(range(self.data_parties)):
            raise DataError(
                f"blocks must be given for data parties {list(range(self.data_parties))}, "
                f"got {sorted(blocks)}"
            )
        n = {len(np.atleast_2d(b)) for b in blocks.values()}
        if len(n) != 1:
            raise DataError(f"every party's block must hold the same rows, got counts {n}")
        prepared = {k: self.prepare(k, b) for k, b in blocks.items() if self.reads(k)}
        return self._finish(None, prepared, {})

    def reads(self, k: int) -> bool:
        """Whether the model reads data party ``k``'s columns (a local-only model: party 0's)."""
        return self.pooled or k in self.scoring

    def _finish(self, ids: list[str] | None, prepared: dict, extra: dict) -> Prediction:
        rt = InProcessRuntime(self.n_parties)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scores = self.score(prepared, rt)
        n = len(scores)
        comm = rt.meter.summary(rt.n_parties)
        record = {
            "method": self.method,
            "rows": n,
            "task": self.task,
            "runtime": "inprocess",
            "comm": comm,
            **per_row(rt.meter, rt.n_parties, n),
            "privacy": self.scoring_privacy(),
            **extra,
        }
        return Prediction(ids, self.classify(scores), scores, record)

    def predict_csv(self, paths: Sequence[str | Path], id_column: str) -> Prediction:
        """Score rows given as per-party CSVs keyed by ``id_column`` (aligned by PSI)."""
        from securevfl.data.alignment import align_tables

        self.check_complete()
        if len(paths) != self.data_parties:
            raise DataError(
                f"--dataset must name one CSV per data party ({self.data_parties}), "
                f"got {len(paths)}"
            )
        read = {k: read_encoded(self, k, p, id_column) for k, p in enumerate(paths)}
        tables = {k: t for k, (t, _) in read.items()}
        kept, align = align_tables(InProcessRuntime(self.data_parties), tables, workers=1)
        prepared = {
            k: self.prepare(k, kept_rows(tables[k], kept[k], read[k][1]))
            for k in kept
            if self.reads(k)
        }
        notes = [w for _, enc in read.values() if enc is not None for w in enc.warnings]
        return self._finish(kept[0].ids, prepared, {"alignment": align, "warnings": notes})

    def predict_test_split(self, dataset: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(scores, labels) of the training run's own test split, reloaded as the card says
        (``dataset``: the training CSVs, ``csv:A.csv,B.csv``, for a model trained on CSV files:
        predict never opens a file a model folder names).

        The split's rows are centred with the card's recorded centring (the means the run
        released), not re-centred: in a run with an ε the released means came from the CSPRNG,
        and drawing them again would move every test row (the scores would differ)."""
        self.check_complete()
        prepared, y = self.test_split_blocks(dataset)
        with np.errstate(all="ignore"):
            scores = self.score(prepared, InProcessRuntime(self.n_parties))
        return scores, y

    def test_split_blocks(
        self, dataset: str | None = None
    ) -> tuple[dict[int, np.ndarray], np.ndarray]:
        """The training run's test split as each data party's prepared block, and its labels
        (:func:`securevfl.model.predict_rows.test_split_blocks`)."""
        return test_split_blocks(self, dataset)


def load_model(path: str | Path, *, noise_seed: int | None = None) -> Model:
    """Load a saved model directory (every party's part, or one party's directory);
    ``noise_seed``: the reproduction mode of a noisy scoring path (see :class:`Model`)."""
    return Model(load_parts(path), noise_seed=noise_seed)
