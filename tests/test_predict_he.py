"""he-vfl saves and predicts: each data party writes its plain weights (those it scored the test
split with at training's end), the coordinator writes nothing (its secret key never reaches the
disk), and predict replays the training run's scoring bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import securevfl
from bench.cli import main
from securevfl.model.files import classes_digest, save_parts
from securevfl.model.predict_privacy import PLAIN_RELEASE
from securevfl.run_options import build_spec

# CKKS with the method's defaults; Paillier at its smallest allowed key (speed: the scoring
# path does not depend on the key size)
SCHEMES = [
    {"scheme": "ckks"},
    {"scheme": "paillier", "paillier_bits": 512, "paillier_randomness": "djn"},
]


@pytest.fixture(autouse=True)
def _all_methods():
    import baselines
    from securevfl.methods import load_all

    load_all()
    baselines.load_all()


def _fit_and_save(out: Path, options: dict) -> tuple:
    """Train he-vfl on breast in one process (3 epochs: 1 epoch is a constant predictor) and
    save it; (the fit, the saved directory)."""
    from securevfl.context import RunContext
    from securevfl.experiment import build_views, validate_spec
    from securevfl.registry import create
    from securevfl.runtime import InProcessRuntime

    spec = build_spec({"method": "he-vfl", "dataset": "breast", "seed": 3, "epochs": 3, **options})
    method = validate_spec(spec)
    facts: dict = {}
    info, views, _ = build_views(spec, method, [0, 1, 2], facts)
    fit = create("method", "he-vfl").fit(
        RunContext(rt=InProcessRuntime(3), spec=spec, info=info, views=views, shared_seed=3)
    )
    save_parts(out, spec, method, info, views, fit, facts, shared_seed=3)
    return fit, out


@pytest.mark.parametrize("options", SCHEMES, ids=lambda o: o["scheme"])
def test_he_vfl_model_rescores_the_test_split_bit_identically(tmp_path, options):
    fit, out = _fit_and_save(tmp_path / "m", options)
    model = securevfl.load_model(out)
    scores, y = model.predict_test_split()
    # the test rows were scored from plain weights (no HE at scoring): the same bits
    assert np.array_equal(scores, fit.test_scores)
    assert classes_digest(model.task, scores) == model.card["test_classes_sha256"]
    assert 0 < np.mean(scores >= 0.5) < 1  # a model, not a constant predictor
    # 114 test rows drawn without the labels (3 epochs): majority rate 0.63
    assert np.mean((scores >= 0.5) == (y == 1)) > 0.75
    # predict's own path (raw rows, prepared from the card, scored over the runtime, metered)
    from securevfl.data import load_dataset

    ds = load_dataset("breast", seed=0)
    pred = model.predict([ds.X[:, model.columns(k)["indices"]] for k in range(2)])
    rec = pred.record
    assert rec["rows"] == len(ds.y)
    # party 1 sends one float64 per row to party 0; the coordinator (party 2) takes no part
    assert 8.0 <= rec["sent_per_row"]["1"] < 8.1  # plus a few bytes of framing per message
    assert rec["sent_per_row"]["0"] == rec["sent_per_row"]["2"] == 0
    assert rec["privacy"]["scored_rows_epsilon"] is None
    assert rec["privacy"]["release"] == PLAIN_RELEASE


def test_he_vfl_saves_no_key_material(tmp_path):
    """Only the data parties' cards and numeric weight files: no coordinator directory, no
    key or context file, and the cards say there is no secret file."""
    out = tmp_path / "m"
    spec = build_spec({"method": "he-vfl", "dataset": "breast", "seed": 3, "epochs": 1})
    record = securevfl.run_experiment(spec, save=str(out))
    assert record["extra"]["ckks"]["poly_modulus_degree"] == 8192  # it ran under CKKS
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == [
        "party_0/bias.npy",
        "party_0/card.json",
        "party_0/w.npy",
        "party_1/card.json",
        "party_1/w.npy",
    ]
    for k in (0, 1):
        card = json.loads((out / f"party_{k}" / "card.json").read_text())
        assert card["meta"]["secret_files"] == [] and card["meta"]["he_scheme"] == "ckks"
        w = np.load(out / f"party_{k}" / "w.npy", allow_pickle=False)
        assert w.dtype == np.float64 and w.shape == (len(card["columns"]["indices"]),)


def test_tampered_he_vfl_weights_are_refused_in_one_line(tmp_path, capsys):
    _, out = _fit_and_save(tmp_path / "m", SCHEMES[0])
    path = out / "party_1" / "w.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 1  # one bit of the last weight
    path.write_bytes(bytes(data))
    assert main(["predict", "--model", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "sha256" in err[0], err
