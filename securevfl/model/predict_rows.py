"""Rows for scoring: a party's CSV encoded by its saved encoder, the rows alignment kept,
the training run's own test split reloaded as the card says, and bytes per scored row.
``model`` arguments are a :class:`securevfl.model.predict.Model`, typed ``Any``: importing it
here would close an import circle."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from securevfl.errors import ConfigError, DataError
from securevfl.model.files import ModelFileError


def read_encoded(model: Any, k: int, path: str | Path, id_column: str) -> tuple[Any, Any]:
    """Party k's CSV and, where the model reads its columns, its rows encoded by the card's
    encoder (:func:`securevfl.data.csv_columns.encode_rows`: columns matched by name, the
    training rules for categories and blanks; one DataError line naming column and line)."""
    from securevfl.data.alignment import read_party_csv
    from securevfl.data.csv_columns import encode_rows

    t = read_party_csv(path, id_column, k)
    if not model.reads(k):  # its IDs take part in the alignment, its columns in nothing
        return t, None
    header, columns = t.features()
    return t, encode_rows(k, Path(path).name, model.rules(k), header, columns)


def kept_rows(table: Any, kept: Any, enc: Any) -> np.ndarray:
    """The encoded rows of the IDs alignment kept, in its order (None: a party not read)."""
    if enc is None:
        return np.zeros((len(kept.ids), 0))
    if not kept.ids:
        raise DataError("the parties' CSVs must share >= 1 ID, got none in common")
    at = {v: i for i, v in enumerate(table.ids)}
    return enc.block[[at[v] for v in kept.ids]]


def per_row(meter: Any, n_parties: int, n: int) -> dict[str, Any]:
    """Bytes of the scoring phase per scored row: in all, and sent by each party."""
    c = meter.phases.get("predict")
    total = c.bytes_total if c is not None else 0
    sent = {
        str(k): (c.sent.get(k, 0) if c is not None else 0) / max(n, 1) for k in range(n_parties)
    }
    return {"bytes_per_row": total / max(n, 1), "sent_per_row": sent}


def test_split_blocks(
    model: Any, dataset: str | None = None
) -> tuple[dict[int, np.ndarray], np.ndarray]:
    """The training run's test split as each data party's prepared block, and its labels:
    loaded, split and partitioned as training did, centred with the card's centring.
    A card's ``csv:`` dataset names files: they are opened only as ``dataset`` names them."""
    from securevfl.data import load_dataset
    from securevfl.data.custom import CSV_KEYS, FILE_PREFIXES
    from securevfl.data.split import apply_split
    from securevfl.experiment import spec_from_dict, validate_spec
    from securevfl.run.steps import party_blocks

    settings = dict(model.card["spec"])
    named = str(settings.get("dataset", ""))
    if dataset is not None:
        settings["dataset"] = dataset
    elif named.startswith(FILE_PREFIXES) or os.sep in named or not named:
        raise ModelFileError(
            "this model was trained on CSV files: predict does not open files a model "
            "folder names: score rows with --dataset csv:A.csv,B.csv, or reload the test "
            "split in Python with predict_test_split(dataset='csv:A.csv,B.csv')"
        )
    spec = spec_from_dict(settings)
    if spec.dataset == "csv":  # each party opened only its own file: no one holds it all
        raise ConfigError(
            "the test split of a run whose parties each named their own file (--data) is "
            "not in one place: score new rows with predict --index K --dataset csv:MINE.csv"
        )
    validate_spec(spec)  # registers a csv: dataset's files
    seed = 0 if spec.seed is None else spec.seed
    opts = {k: v for k, v in spec.dataset_options.items() if k not in CSV_KEYS}
    ds = load_dataset(spec.dataset, seed=seed, **opts)
    blocks = party_blocks(ds.groups, spec, seed)
    test_rows = model.card.get("test_rows")
    if test_rows is None:
        raise ModelFileError(
            "model card must list the run's test rows (test_rows), got none (saved before "
            "the split was drawn by the label holder: retrain)"
        )
    test_idx = np.asarray(test_rows, dtype=np.int64)
    train_idx = np.setdiff1d(np.arange(ds.n), test_idx)
    _, test = apply_split(ds, train_idx, test_idx)
    prepared = {}
    for k in range(model.data_parties):
        if not model.reads(k):
            continue
        cols = model.columns(k)
        if [int(c) for c in blocks[k]] != [int(c) for c in cols["indices"]]:
            raise ModelFileError(
                f"model card's party {k} columns must be the run's partition, got "
                f"{cols['indices']} (the dataset changed since training?)"
            )
        X = np.array(test.X[:, blocks[k]], dtype=np.float64)
        for j, c in enumerate(cols.get("center") or []):
            if c is not None:  # as training centred: (x - m) / scale, clipped
                X[:, j] = np.clip((X[:, j] - c[0]) / c[1], -1.0, 1.0)
        # C-ordered as training's views: BLAS sums in an order that depends on the layout
        prepared[k] = np.ascontiguousarray(X / math.sqrt(model.bound_sq))
    return prepared, test.y
