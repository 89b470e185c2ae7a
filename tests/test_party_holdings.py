"""What a data party's own process holds in a ``--processes`` run: its block, its keys and its
part of the model, none of another party's, and no label (issue 41's acceptance).

One secureboost run (the label holder makes the Paillier key pair; the other party gets only
the public key) with ``--save``; every process writes what it holds (``securevfl.run.probe``)
once its views are built and once it has trained.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from securevfl.data import load_dataset
from securevfl.experiment import run_in_processes
from securevfl.model.files import load_part, party_dir
from securevfl.run.probe import PROBE_ENV
from securevfl.run_options import build_spec
from tests.test_deploy import _label_hashes


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    probes, save = tmp_path_factory.mktemp("probes"), tmp_path_factory.mktemp("save")
    mp = pytest.MonkeyPatch()
    mp.setenv(PROBE_ENV, str(probes))
    try:
        spec = build_spec(
            {
                "method": "secureboost",
                "dataset": "breast",
                "seed": 1,
                "trees": 2,
                "depth": 2,
                "paillier_bits": 512,
            }
        )
        rec = run_in_processes(spec, save=str(save))
    finally:
        mp.undo()
    read = {p.stem: json.loads(p.read_text()) for p in probes.glob("*.json")}
    return rec, read, save


def test_each_process_holds_only_its_own_partys_record(run):
    _, read, _ = run
    assert sorted(read) == ["probe_0", "probe_1", "trained_0", "trained_1"]
    for k in ("0", "1"):
        assert list(read[f"probe_{k}"]["parties"]) == [k]
        assert list(read[f"trained_{k}"]["parties"]) == [k]


def test_a_data_partys_process_holds_no_label_and_not_the_other_block(run):
    rec, read, _ = run
    d0 = rec["features_per_party"][0]
    rows = {rec["n_train"], rec["n_test"]}
    # party 0's block as the label holder's process holds it (its train and test views)
    block0 = {
        h
        for h, shape in read["probe_0"]["arrays"].items()
        if len(shape) == 2 and shape[0] in rows and shape[1] == d0
    }
    assert block0  # the check sees the other party's block where it lives
    y = load_dataset("breast").y
    labels = _label_hashes(y, len(y))
    assert labels & set(read["probe_0"]["arrays"])  # and the labels at the label holder
    for stage in ("probe_1", "trained_1"):  # after its views are built, and after training
        held = set(read[stage]["arrays"])
        assert not block0 & held, stage
        assert not labels & held, stage
    assert not read["probe_1"]["train_labels"]
    assert not read["probe_1"]["parties"]["1"]["holds_labels"]


def test_a_data_party_holds_only_the_public_key_and_the_key_holder_the_pair(run):
    _, read, _ = run
    holder, data = read["trained_0"], read["trained_1"]
    he0, he1 = holder["parties"]["0"]["he"], data["parties"]["1"]["he"]
    assert he0["private"] and not he1["private"]
    assert he0["public"] == he1["public"]  # the run's one key pair, made at the label holder
    assert {"PaillierPrivateKey"} <= {o["type"] for o in holder["keys_held"] if o["private"]}
    assert not [o for o in data["keys_held"] if o["private"]]  # anywhere in its process


def test_a_data_party_holds_its_own_model_part_and_saves_it_from_its_record(run):
    _, read, save = run
    own = read["trained_1"]["parties"]["1"]["model"]
    other = read["trained_0"]["parties"]["0"]["model"]
    assert own and other
    held = set(read["trained_1"]["arrays"])
    # the label holder's trees (its part's arrays that are not the data party's)
    only0 = set(other.values()) - set(own.values())
    assert only0 and not only0 & held
    for k, part in ((0, other), (1, own)):  # --save wrote each party's part from its record
        saved = load_part(party_dir(save, k)).arrays
        assert sorted(saved) == sorted(part)
        for name, arr in saved.items():
            digest = hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()
            assert digest == part[name], name


def test_a_key_is_kept_on_its_partys_record_only_where_it_lives():
    from securevfl.context import RunContext
    from securevfl.run.parties import Party

    mine = Party(index=1, source="file b.csv", columns=np.arange(2), holds_labels=False)
    ctx = RunContext(rt=None, spec=None, info=None, views={}, shared_seed=0, parties={1: mine})  # type: ignore[arg-type]
    side = object()
    ctx.hold_key(1, "secagg", side)
    assert mine.keys.secagg is side  # the handle itself, not a copy
    ctx.hold_key(0, "he", object())  # party 0 does not live here: nothing kept
    assert mine.keys.he is None
    with pytest.raises(ValueError, match="key kind"):
        ctx.hold_key(1, "session", side)
