"""One party of a networked predict: its own part, its own CSV, PSI with the others, its
messages to the label holder (``securevfl predict --index K -P ...``)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from securevfl.model.files import ModelFileError
from securevfl.model.predict import Model, Prediction
from securevfl.model.predict_rows import kept_rows, per_row, read_encoded


def predict_party(
    model_dir: str | Path,
    csv_path: str | Path,
    id_column: str,
    index: int,
    addresses: Sequence[str],
    *,
    cert_dir: str | None = None,
    run_id: str = "",
    timeout: float = 120.0,
    key: bytes = b"",
    warn: Callable[[str], None] | None = None,
) -> Prediction | None:
    """One party of a networked predict: it loads only its own part and its own CSV, aligns
    its rows with the others' by PSI and sends its messages; the label holder returns the
    prediction (None elsewhere). ``model_dir``: the party's directory (or the model's root).
    ``warn`` is given each line of this party's own encoding warnings (they stay on its host;
    the label holder's are also in its record)."""
    import hashlib

    from securevfl.data.alignment import align_tables
    from securevfl.errors import ConfigError
    from securevfl.model.files import load_part, party_dir
    from securevfl.party import check_addresses
    from securevfl.runtime.networked import NetworkedRuntime

    check_addresses(addresses, cert_dir)
    d = Path(model_dir)
    if not (d / "card.json").is_file() and party_dir(d, index).is_dir():
        d = party_dir(d, index)
    part = load_part(d)
    if part.party != index:
        raise ModelFileError(
            f"model card {str(d / 'card.json')!r} must belong to party {index}, got party "
            f"{part.party} (a party's model used for another party)"
        )
    model = Model({index: part})
    # only the data parties score: a training run's helpers that hold no part (he-vfl's key
    # holder, fm-vfl's MPC parties) take no part in predict, so the group is the data parties
    n = model.data_parties
    if model.pooled or model.scoring != list(range(n)) or model.label_party >= n:
        raise ConfigError(
            f"networked predict needs a model scored by its data parties alone, each holding "
            f"data and a part, got method {model.method!r} ({model.n_parties} parties, "
            f"scoring {model.scoring}, label holder {model.label_party})"
        )
    if index >= n:
        raise ConfigError(f"--index must be a data party of the model (< {n}), got {index}")
    if len(addresses) != n:
        raise ConfigError(
            f"-P must be given once per data party of the model ({n}), got {len(addresses)}"
        )
    table, enc = read_encoded(model, index, csv_path, id_column)
    for line in enc.warnings if enc is not None and warn is not None else []:
        warn(line)
    doc = f"predict/{part.card['model_id']}/{run_id}/{n}"
    digest = hashlib.sha256(doc.encode()).digest()
    rt = NetworkedRuntime(
        index, addresses, digest=digest, timeout=timeout, cert_dir=cert_dir, key=key
    )
    try:
        kept, align = align_tables(rt, {index: table}, workers=1)
        prepared = {index: model.prepare(index, kept_rows(table, kept[index], enc))}
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scores = model.score(prepared, rt)
        meters = rt.collect(rt.meter.export(), dst=model.label_party)
    except BaseException:
        rt.close(graceful=False)
        raise
    rt.close()
    if scores is None:
        return None
    from securevfl.runtime.channel import merge_reports

    merged = merge_reports(rt, meters, frame_limit=rt.frame_limit)
    comm = merged.summary(n)
    rows = len(scores)
    record = {
        "method": model.method,
        "rows": rows,
        "task": model.task,
        "runtime": "processes",
        "comm": comm,
        **per_row(merged, n, rows),
        "alignment": align,
        "privacy": model.scoring_privacy(),
        "warnings": enc.warnings if enc is not None else [],  # the label holder's own
    }
    return Prediction(kept[index].ids, model.classify(scores), scores, record)
