"""Hostile peers, round two (issue 45): a saved model folder is a closed world.

The red team's tampered folders: a .npy symlinked to a file outside the folder (hash updated),
a party folder that is a link, a negative row-norm bound, a deeply nested card, a resized
``w.npy`` with its hash updated, a classifier card edited to regression, a card whose dataset
names ``csv:`` and a system file, a card that is not UTF-8, a 4096 x 4096 pooling grid. Each is
refused with one ModelFileError naming the file or field, quoting no file content.
"""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import securevfl
from securevfl.context import RunSpec
from securevfl.experiment import run_experiment
from securevfl.model.files import ModelFileError
from securevfl.model.layers import check_layers

SECRET = "TOP-SECRET-FIRST-LINE"


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("model") / "m"
    run_experiment(
        RunSpec(method="vfl", dataset="breast", parties=2, model="glm", epochs=1, seed=0),
        save=str(out),
    )
    return out


@pytest.fixture
def model(saved, tmp_path) -> Path:
    dst = tmp_path / "m"
    shutil.copytree(saved, dst)
    return dst


def _card(model: Path, k: int) -> dict:
    return json.loads((model / f"party_{k}" / "card.json").read_text())


def _write_card(model: Path, k: int, card: dict) -> None:
    (model / f"party_{k}" / "card.json").write_text(json.dumps(card))


def _refused(model: Path, match: str) -> str:
    with pytest.raises(ModelFileError, match=match) as err:
        securevfl.load_model(model).predict_test_split()
    msg = str(err.value)
    assert "\n" not in msg and SECRET not in msg
    return msg


def test_an_untampered_model_loads(model):
    scores, y = securevfl.load_model(model).predict_test_split()
    assert len(scores) == len(y) > 0


def test_a_npy_symlinked_outside_the_folder_is_not_followed(model, tmp_path):
    outside = tmp_path / "outside.npy"
    np.save(outside, np.zeros(3))
    outside.write_bytes(outside.read_bytes()[:-8] + SECRET.encode()[:8])
    w = model / "party_1" / "w.npy"
    w.unlink()
    w.symlink_to(outside)
    card = _card(model, 1)
    card["files"]["w.npy"] = hashlib.sha256(outside.read_bytes()).hexdigest()
    _write_card(model, 1, card)
    _refused(model, "must be a regular file, got a symlink")


def test_a_party_folder_that_is_a_link_is_not_followed(model, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(model / "party_1"), elsewhere)
    (model / "party_1").symlink_to(elsewhere, target_is_directory=True)
    _refused(model, "must be a directory, not a link")


@pytest.mark.parametrize("bound", [-1.0, 0.0, float("inf"), "x", True])
def test_a_bad_row_norm_bound_is_refused_by_name(model, bound):
    card = _card(model, 0)
    card["preprocessing"]["row_norm_bound_sq"] = bound
    _write_card(model, 0, card)
    _refused(model, "row_norm_bound_sq")


def test_a_deeply_nested_card_is_one_line(model):
    path = model / "party_0" / "card.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    _refused(model, "nests too deeply|must have format")


def test_a_card_that_is_not_utf8_does_not_echo_its_bytes(model):
    (model / "party_0" / "card.json").write_bytes(b"\xff\xfe" + SECRET.encode())
    _refused(model, "must be UTF-8 JSON")


def test_a_resized_array_with_its_hash_updated_is_refused_against_the_columns(model):
    w = model / "party_1" / "w.npy"
    np.save(w, np.zeros(len(np.load(w)) + 5))
    card = _card(model, 1)
    card["files"]["w.npy"] = hashlib.sha256(w.read_bytes()).hexdigest()
    _write_card(model, 1, card)
    _refused(model, "array w of")


def test_a_classifier_card_edited_to_regression_is_refused(model):
    card = _card(model, 0)
    assert card["task"] == "binary"
    card["task"] = "regression"
    _write_card(model, 0, card)
    _refused(model, "task|n_classes|link")


@pytest.mark.parametrize("key,value", [("party", 7), ("label_party", -1), ("n_parties", 0)])
def test_out_of_range_card_numbers_are_refused(model, key, value):
    card = _card(model, 0)
    card[key] = value
    _write_card(model, 0, card)
    _refused(model, key)


def test_a_card_naming_a_system_file_as_its_dataset_opens_nothing(model, tmp_path):
    target = tmp_path / "system.txt"
    target.write_text(SECRET + "\nmore\n")
    for k in (0, 1):
        card = _card(model, k)
        card["spec"]["dataset"] = f"csv:{target},{target}"
        card["settings"]["dataset"] = card["spec"]["dataset"]
        _write_card(model, k, card)
    _refused(model, "does not open files a model folder names")


def test_a_pooling_grid_finer_than_its_image_is_refused_before_allocating():
    specs = [
        {"type": "place", "in": 4, "rows": 2, "width": 2, "input_scale": 1.0},
        {"type": "adaptive_avgpool2d", "out": [4096, 4096]},
    ]
    arrays = {"b.0.index": np.arange(4)}
    with pytest.raises(ModelFileError, match=r"'out' an integer in \[1, 2\]"):
        check_layers(specs, arrays, "b.")
    specs[1]["out"] = [2, 2]
    assert check_layers(specs, arrays, "b.")[1][1]["out"] == (2, 2)
