"""Two organisations, each with only its own file: the deployment flow of docs/deploy.md.

A bank (text customer IDs, a categorical column, blank cells, label ``default_12m``) and an
insurer (partly overlapping IDs) each run ``securevfl party`` in a directory holding only its own
files; they train, save their parts and score new customers with ``predict``, one process each.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from protocols.processes import free_ports
from securevfl.data.split import draw_split
from securevfl.experiment import build_views, run_in_processes, validate_spec
from securevfl.rng import make_rng
from securevfl.run.steps import PROBE_ENV
from securevfl.run_options import build_spec
from securevfl.runtime.inprocess import InProcessRuntime
from securevfl.runtime.view import ViewRecorder
from tests.deploy_data import write_pair

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
CLI = [sys.executable, "-m", "bench.cli"]
ID = "customer_id"


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    root = tmp_path_factory.mktemp("hosts")
    facts = write_pair(root / "bank", root / "insurer")
    (root / "server").mkdir()
    return root, facts


def _run_all(jobs: list[tuple[Path, list[str]]], timeout: float = 300) -> list[str]:
    """Start every party's command in its own directory; their stdout, each exit checked."""
    procs = [
        subprocess.Popen(
            [*CLI, *args], cwd=d, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for d, args in jobs
    ]
    try:
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            assert p.returncode == 0, err[-2000:]
            outs.append(out)
        return outs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _addresses(n: int) -> list[str]:
    return [a for p in free_ports(n) for a in ("-P", f"127.0.0.1:{p}")]


def _train(root: Path, method: str, extra: list[str], save: str) -> dict:
    """One run: the bank (party 0), the insurer (party 1) and, for fm-vfl, a server."""
    n = 3 if method == "fm-vfl" else 2
    common = ["party", method, "--id-column", ID, "--seed", "1", "--run-id", save]
    common += ["--save", save, "--timeout", "60", *extra, *_addresses(n)]
    bank = [*common, "--index", "0", "--data", "bank.csv", "--label-column", "default_12m"]
    bank += ["--categories", "categories.json", "--json"]
    jobs = [
        (root / "bank", bank),
        (root / "insurer", [*common, "--index", "1", "--data", "insurer.csv"]),
    ]
    if n == 3:
        jobs.append((root / "server", [*common, "--index", "2", "--dataset", "csv"]))
    outs = _run_all(jobs)
    return json.loads(outs[0].strip().splitlines()[-1])


def _scores(path: Path) -> dict[str, tuple[str, str]]:
    with path.open() as f:
        rows = list(csv.reader(f))
    return {r[0]: (r[1], r[2]) for r in rows[1:]}


@pytest.mark.parametrize(
    "method,extra",
    [("vfl", []), ("hdp-vfl", ["--epsilon", "2"]), ("fm-vfl", ["--epsilon", "2"])],
)
def test_bank_and_insurer_train_save_and_score_new_customers_apart(hosts, method, extra):
    root, facts = hosts
    save = f"model-{method}"
    rec = _train(root, method, extra, save)
    assert rec["dataset"] == "csv" and rec["runtime"] == "processes"
    assert rec["alignment"]["kept"] == len(facts["intersection"])
    assert rec["n_train"] + rec["n_test"] == len(facts["intersection"])
    assert not (root / "insurer" / save / "party_0").exists()  # each part stays where it lives
    # each party scores its own new-rows file; the bank writes the scores
    n = 2
    common = ["predict", "--id-column", ID, "--run-id", f"p-{method}", *_addresses(n)]
    bank = [*common, "--index", "0", "--model", f"{save}/party_0", "--dataset", "csv:bank_new.csv"]
    bank += ["--out", "scores.csv", "--json"]
    insurer = [*common, "--index", "1", "--model", f"{save}/party_1"]
    insurer += ["--dataset", "csv:insurer_new.csv"]
    _run_all([(root / "bank", bank), (root / "insurer", insurer)])
    apart = _scores(root / "bank" / "scores.csv")
    assert sorted(apart) == facts["new_intersection"]  # a score for every new shared customer
    # the same model scored in one process (both parts and both files in one place)
    one = root / f"one-{method}"
    one.mkdir()
    shutil.copytree(root / "bank" / save / "party_0", one / "model" / "party_0")
    shutil.copytree(root / "insurer" / save / "party_1", one / "model" / "party_1")
    for f in ("bank/bank_new.csv", "insurer/insurer_new.csv"):
        shutil.copy(root / f, one)
    out = _run_all(
        [
            (
                one,
                [
                    "predict",
                    "--model",
                    "model",
                    "--dataset",
                    "csv:bank_new.csv,insurer_new.csv",
                    "--id-column",
                    ID,
                    "--out",
                    "scores.csv",
                    "--json",
                ],
            )
        ]
    )
    together = _scores(one / "scores.csv")
    assert sorted(together) == sorted(apart)
    if json.loads(out[0].strip().splitlines()[-1])["privacy"].get("mechanism") is None:
        assert together == apart  # no noise at scoring: the same bits


def _label_hashes(labels: np.ndarray, n: int) -> set[str]:
    """sha256 of the label vector as a party would hold it: whole, train and test parts."""
    train, test = draw_split(n, rng=make_rng(1, purpose="split"))
    out = set()
    for part in (labels, labels[train], labels[test]):
        for dtype in (np.int64, np.float64):
            out.add(hashlib.sha256(np.ascontiguousarray(part, dtype=dtype).tobytes()).hexdigest())
    return out


def _own_file_params(root: Path) -> dict:
    """vfl on the bank's and the insurer's files (each process opens its own)."""
    return {
        "method": "vfl",
        "dataset": f"csv:{root / 'bank' / 'bank.csv'},{root / 'insurer' / 'insurer.csv'}",
        "id_column": ID,
        "label_column": "default_12m",
        "categories": str(root / "bank" / "categories.json"),
        "seed": 1,
        "epochs": 3,
    }


@pytest.fixture(scope="module")
def own_file_run(hosts, tmp_path_factory):
    """One run of :func:`_own_file_params` in processes, each party writing its memory probe:
    its record and the probes (two tests read them)."""
    root, _ = hosts
    probe_dir = tmp_path_factory.mktemp("probes")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(PROBE_ENV, str(probe_dir))
        rec = run_in_processes(build_spec(_own_file_params(root)))
    probes = {p.name: json.loads(p.read_text()) for p in probe_dir.glob("probe_*.json")}
    return rec, probes


def test_a_data_party_process_holds_no_label_and_no_other_block(hosts, own_file_run):
    _, facts = hosts
    rec, probes = own_file_run
    assert sorted(probes) == ["probe_0.json", "probe_1.json"]
    mine = probes["probe_1.json"]
    assert mine["parties"]["1"]["source"] == "file insurer.csv"
    assert not mine["parties"]["1"]["holds_labels"] and not mine["parties"]["1"]["view_labels"]
    assert not mine["train_labels"]
    d_bank, d_ins = rec["features_per_party"]
    assert mine["parties"]["1"]["columns"] == list(range(d_bank, d_bank + d_ins))
    y = np.array([facts["labels"][i] for i in facts["intersection"]])
    labels = _label_hashes(y, len(y))
    assert labels & set(probes["probe_0.json"]["arrays"])  # the check sees the label holder's
    assert not labels & set(mine["arrays"])
    n = len(y)
    rows = {n, rec["n_train"], rec["n_test"]}
    for shape in mine["arrays"].values():  # no block with the bank's column count
        assert not (len(shape) == 2 and shape[0] in rows and shape[1] >= d_bank), shape


def test_a_catalogue_data_party_process_keeps_no_labels(tmp_path, monkeypatch):
    monkeypatch.setenv(PROBE_ENV, str(tmp_path))
    spec = build_spec({"method": "vfl", "dataset": "breast", "seed": 1, "epochs": 1})
    run_in_processes(spec)
    mine = json.loads((tmp_path / "probe_1.json").read_text())
    assert not mine["train_labels"] and not mine["parties"]["1"]["holds_labels"]
    from securevfl.data import load_dataset

    y = load_dataset("breast").y
    assert not _label_hashes(y, len(y)) & set(mine["arrays"])


def _data_party_view(bank_csv: Path, insurer_csv: Path, cats: Path) -> tuple:
    spec = build_spec(
        {
            "method": "hdp-vfl",
            "dataset": f"csv:{bank_csv},{insurer_csv}",
            "id_column": ID,
            "label_column": "default_12m",
            "categories": str(cats),
            "seed": 1,
            "epsilon": 2.0,
            "reproducible_noise": True,
        }
    )
    method = validate_spec(spec)
    rt = InProcessRuntime(method.n_parties(spec))
    rt.view = ViewRecorder(1)
    info, views, _ = build_views(spec, method, rt.local_parties, rt=rt)
    return info, views[1], rt.view.view.received


def test_a_data_partys_view_is_the_same_under_two_label_vectors(hosts, tmp_path):
    root, _ = hosts
    bank = root / "bank" / "bank.csv"
    flipped = tmp_path / "bank.csv"
    lines = bank.read_text().splitlines()
    rng = np.random.default_rng(5)  # another label vector: each label redrawn at random
    out = [lines[0]] + [ln.rsplit(",", 1)[0] + f",{rng.integers(2)}" for ln in lines[1:]]
    flipped.write_text("\n".join(out) + "\n")
    assert out != lines
    cats, ins = root / "bank" / "categories.json", root / "insurer" / "insurer.csv"
    info_a, view_a, got_a = _data_party_view(bank, ins, cats)
    info_b, view_b, got_b = _data_party_view(flipped, ins, cats)
    assert view_a.y_train is None and view_b.y_train is None
    # counts and schema (the dataset's name is the two files' paths)
    assert dataclasses.replace(info_a, dataset="") == dataclasses.replace(info_b, dataset="")
    np.testing.assert_array_equal(view_a.columns, view_b.columns)
    np.testing.assert_array_equal(view_a.X_train, view_b.X_train)  # row order and values
    np.testing.assert_array_equal(view_a.X_test, view_b.X_test)
    assert len(got_a) == len(got_b) == 1  # before training: the split's positions only
    for a, b in zip(got_a[0].payload, got_b[0].payload, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_run_digest_covers_the_shared_options_not_each_partys_file():
    from securevfl.runtime.runspec import run_digest

    def spec(**own):
        base = {"method": "vfl", "dataset": "csv", "id_column": ID, "seed": 1, **own}
        return dict(build_spec(base).__dict__)

    bank = spec(data="bank.csv", label_column="default_12m", categories="c.json")
    insurer = spec(data="insurer.csv", bounds="b.csv")
    assert run_digest(bank, n_parties=2) == run_digest(insurer, n_parties=2)
    assert run_digest(bank, n_parties=2) != run_digest(spec(data="bank.csv", seed=2), n_parties=2)


@pytest.mark.parametrize(
    "args,rule",
    [
        (["--dataset", "csv:a.csv,b.csv"], "a party names only its own file"),
        (["--dataset", "csv"], "party 1 must name its own file with --data"),
        (["--data", "missing.csv"], "--data must be a file"),
    ],
)
def test_a_party_names_only_its_own_file(args, rule, tmp_path, capsys, monkeypatch):
    from bench.cli import main

    argv = ["party", "vfl", "--index", "1", "-P", "127.0.0.1:1", "-P", "127.0.0.1:2", *args]
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert rule in err and len(err.strip().splitlines()) == 1, err


def test_each_process_opening_its_own_file_trains_the_same_model_as_one_process(
    hosts, own_file_run
):
    """The own-file loader encodes, scales and aligns as the one-process csv: loader does."""
    from securevfl.experiment import run_experiment

    root, _ = hosts
    one = run_experiment(build_spec(_own_file_params(root)))
    apart, _ = own_file_run  # the same run in processes, each party opening its own file
    assert apart["features_per_party"] == one["features_per_party"]
    assert apart["model_fingerprint"] == one["model_fingerprint"]
    assert apart["metrics"] == one["metrics"]
