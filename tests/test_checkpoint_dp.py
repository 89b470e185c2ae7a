"""Checkpoints of DP runs (issue 26, item 6): hdp-vfl on the GLM trainer and ldp-vfl on the
split-NN trainer resume after a SIGKILL; the reproduction mode ends with the uninterrupted run's
model, metrics and releases; under the CSPRNG every stage released before the kill is composed
again (checked against an independent Gaussian-DP composition) and no noise key is on disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import securevfl
from bench.cli import main
from securevfl.model.checkpoint import make_checkpoints
from securevfl.model.checkpoint_privacy import _LINE, event_json, event_of
from securevfl.run_options import build_spec

ROOT = Path(__file__).resolve().parents[1]
HDP = {"method": "hdp-vfl", "dataset": "phishing", "epochs": 12, "batch_size": 16, "seed": 3}
HDP_CLI = ["run", "hdp-vfl", "--dataset", "phishing", "--epochs", "12", "--batch-size", "16"]
LDP = {
    "method": "ldp-vfl",
    "model": "mlp",
    "dataset": "breast",
    "epochs": 8,
    "seed": 3,
    "release_schedule": "split",
}
LDP_CLI = ["run", "ldp-vfl", "--model", "mlp", "--dataset", "breast", "--epochs", "8"]
LDP_CLI += ["--release-schedule", "split"]


def _epochs_started(ck: Path) -> list[int]:
    path = ck / "party_0" / "started.log"
    text = path.read_text() if path.is_file() else ""
    return [int(x.split()[1]) for x in text.split("\n")[:-1] if x.startswith("epoch ")]


def _kill_mid_epoch(args: list[str], ck: Path, epoch: int) -> None:
    """Run ``args`` with a checkpoint every epoch; SIGKILL it once the checkpoint of ``epoch``
    epochs is whole and the next epoch has logged its start (so it may have released)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "bench.cli", *args, "--checkpoint-every", "1"]
    proc = subprocess.Popen(
        [*cmd, "--checkpoint", str(ck)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    latest = ck / "party_1" / "latest.json"
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                done = int(json.loads(latest.read_text())["dir"][1:])
            except (OSError, ValueError, KeyError):
                done = -1
            if done >= epoch and max(_epochs_started(ck), default=-1) >= done:
                proc.send_signal(signal.SIGKILL)  # mid-epoch: no chance to clean up
                break
            time.sleep(0.005)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"


def _resume(args: dict, ck: Path) -> dict:
    spec = build_spec(dict(args))
    ckp = make_checkpoints(spec, every=None, directory=None, resume=str(ck))
    return securevfl.run_experiment(spec, checkpoints=ckp)


def _gdp_epsilon(mu: float, delta: float) -> float:
    """Independent: ε of μ-Gaussian DP at δ (Dong, Roth & Su 2019, Cor. 2.13),
    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), solved for ε."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    def gap(e: float) -> float:
        return norm.cdf(-e / mu + mu / 2) - np.exp(e) * norm.cdf(-e / mu - mu / 2) - delta

    return brentq(gap, 0.0, 500.0)


def _same_run(whole: dict, resumed: dict) -> None:
    assert resumed["model_fingerprint"] == whole["model_fingerprint"]
    assert resumed["metrics"] == whole["metrics"]
    p, q = dict(whole["privacy"]), dict(resumed["privacy"])
    info = q.pop("resumed")
    assert info["counted_twice"] is False  # the re-sent messages are the ones sent before
    assert q == p  # ε (none in this mode), its units and every release line
    assert len(resumed["stats"]["epoch_s"]) == len(whole["stats"]["epoch_s"])


@pytest.mark.parametrize("name", ["hdp-vfl", "ldp-vfl"])
def test_reproduction_mode_resume_after_a_kill_gives_the_uninterrupted_run(tmp_path, name):
    """--reproducible-noise: the noise position (draws handed out) is saved and skipped on
    resume, so the resumed run re-sends exactly what it sent and ends as if never killed (for
    hdp-vfl with final_fit=refit: the label holder's kept messages are restored too)."""
    args, cli = (HDP, HDP_CLI) if name == "hdp-vfl" else (LDP, LDP_CLI)
    args = {**args, "epsilon": 1.0, "reproducible_noise": True}
    ck = tmp_path / "ck"
    _kill_mid_epoch([*cli, "--epsilon", "1", "--seed", "3", "--reproducible-noise"], ck, 2)
    whole = securevfl.run_experiment(build_spec(dict(args)))
    resumed = _resume(args, ck)
    _same_run(whole, resumed)
    assert resumed["privacy"]["resumed"]["epochs_re_released"] >= 1


def test_hdp_deconvolved_threshold_resumes_with_the_derivatives_it_kept(tmp_path):
    """threshold=deconvolved: the label holder's recorded exact derivatives (and mean
    derivative trajectory) are part of its checkpoint; resumed from the last checkpoint of a
    finished run (reproduction mode) the threshold refit and the model are the uninterrupted
    run's."""
    args = {
        **HDP,
        "dataset": "breast",
        "epochs": 8,
        "batch_size": 64,
        "epsilon": 1.0,
        "reproducible_noise": True,
        "options": {"threshold": "deconvolved", "final_fit": "trained", "intercept": "free"},
    }
    spec = build_spec(dict(args))
    ck = tmp_path / "ck"
    whole = securevfl.run_experiment(
        spec, checkpoints=make_checkpoints(spec, every=1, directory=str(ck), resume=None)
    )
    assert json.loads((ck / "party_0" / "latest.json").read_text())["dir"] == "e7"
    resumed = _resume(args, ck)
    _same_run(whole, resumed)
    assert resumed["privacy"]["stream"]["threshold"] == whole["privacy"]["stream"]["threshold"]
    assert whole["privacy"]["stream"]["threshold"]["rows"] > 0


def test_hdp_csprng_resume_counts_the_epochs_released_before_the_kill(tmp_path):
    """Fresh noise after a resume: every epoch the log marks started after the checkpoint is
    composed twice, and the earlier run's centring too; ε = an independent Gaussian-DP
    composition of the uninterrupted run's releases plus those, and a warning says why."""
    args = {**HDP, "epsilon": 1.0}
    ck = tmp_path / "ck"
    _kill_mid_epoch([*HDP_CLI, "--epsilon", "1", "--seed", "3"], ck, 2)
    c = int(json.loads((ck / "party_0" / "latest.json").read_text())["dir"][1:])
    again = [e for e in _epochs_started(ck) if e >= c]
    assert again, "the kill came after the next epoch had started"
    whole = securevfl.run_experiment(build_spec(dict(args)))
    resumed = _resume(args, ck)
    info = resumed["privacy"]["resumed"]
    assert info == {
        "checkpoint_epoch": c,
        "epochs_re_released": len(again),
        "scorings_re_released": 0,
        "centrings_re_released": 1,
        "counted_twice": True,
    }
    assert any("epsilon exceeds the target" in w for w in resumed["stats"]["warnings"])
    delta = whole["privacy"]["delta"]
    eps_c = whole["privacy"]["centring"]["epsilon_per_party"]
    expect = {}
    for k in ("0", "1"):
        lines = [r for r in whole["privacy"]["releases"] if r["party"] == int(k)]
        gauss = [r for r in lines if r["mechanism"] == "gaussian"]
        epochs = gauss[: HDP["epochs"]]  # one line per epoch, in order (distinct σ/Δ each)
        assert all(r["count"] == 1 for r in epochs)
        mu_sq = sum(r["count"] / r["noise_multiplier"] ** 2 for r in gauss)
        mu_sq += sum(1 / epochs[e]["noise_multiplier"] ** 2 for e in again)
        pure = sum(r["count"] * r["epsilon"] for r in lines if r["mechanism"] == "pure")
        expect[k] = _gdp_epsilon(np.sqrt(mu_sq), delta) + pure + eps_c
        got = resumed["privacy"]["per_party"][k]["epsilon"]
        assert got == pytest.approx(expect[k], rel=1e-6)
    assert resumed["privacy"]["epsilon"] == pytest.approx(max(expect.values()), rel=1e-6)
    assert resumed["privacy"]["epsilon"] > whole["privacy"]["epsilon"] * 1.01


def test_ldp_csprng_resume_counts_again_and_leaves_no_noise_key(tmp_path, monkeypatch):
    """ldp-vfl (exact bottoms) under the CSPRNG: a resume from the last checkpoint of a run
    that went on to its end re-runs the last epoch and the private scoring with fresh noise;
    the record composes both once more (independent check). The AES keys the CSPRNG drew are
    in no file of the checkpoint directory, whose state holds only the listed public facts."""
    import protocols.keystream as keystream

    keys: list[bytes] = []
    real = os.urandom

    def recording(n: int) -> bytes:
        out = real(n)
        if n in (16, 32):  # AES-256 keys and CTR counters
            keys.append(out)
        return out

    monkeypatch.setattr(keystream.os, "urandom", recording)  # where the CSPRNG keys itself
    args = {**LDP, "epochs": 3, "epsilon": 4.0, "bottom": "exact"}
    spec = build_spec(dict(args))
    ck = tmp_path / "ck"
    whole = securevfl.run_experiment(
        spec, checkpoints=make_checkpoints(spec, every=1, directory=str(ck), resume=None)
    )
    assert len(keys) >= 2
    for f in ck.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            assert not any(k in data or k.hex().encode() in data for k in keys), f
    doc = json.loads((ck / "party_1" / "e2" / "state.json").read_text())
    assert set(doc) == {"run_key", "epoch", "files", "privacy", "step", "stats"}
    assert set(doc["privacy"]) == {"releases", "logged", "counts"}
    assert set(doc["privacy"]["counts"]) == {"noise_draws", "bottom_draws"}
    assert all(n.startswith("bottom.") for n in doc["files"])  # the model and Adam state only
    log = (ck / "party_1" / "started.log").read_text().split("\n")[:-1]
    assert log == ["start", "epoch 0", "epoch 1", "epoch 2", "eval"]

    resumed = _resume(args, ck)
    info = resumed["privacy"]["resumed"]
    assert (info["epochs_re_released"], info["scorings_re_released"]) == (1, 1)
    (line,) = [r for r in whole["privacy"]["releases"] if r["party"] == 0]
    n_train, n_test = 455, 114  # breast's split: every row of each is released once more
    assert line["count"] == 3 * n_train + n_test
    mu = np.sqrt(line["count"] + n_train + n_test) / line["noise_multiplier"]
    delta = whole["privacy"]["delta"]
    assert resumed["privacy"]["epsilon"] == pytest.approx(_gdp_epsilon(mu, delta), rel=1e-6)
    assert resumed["privacy"]["epsilon"] > whole["privacy"]["epsilon"]


def test_releases_round_trip_and_a_cut_log_line_is_dropped(tmp_path):
    from dp_accounting import dp_event

    from securevfl.privacy.events import PureDpEvent

    for ev in (dp_event.GaussianDpEvent(3.5), dp_event.LaplaceDpEvent(2.0), PureDpEvent(0.1)):
        assert event_of(event_json(ev, 4)) == (ev, 4)
    assert [x for x in "start\nepoch 3\nepoch 4".split("\n")[:-1] if _LINE.fullmatch(x)] == [
        "start",
        "epoch 3",
    ]


def test_the_release_once_schedule_refuses_in_one_line(tmp_path, capsys):
    """Release-once (labels, DP-SGD bottoms, one release, head epochs) keeps its stages' state
    outside the trainers: refused before any release (pbm-vfl: tests/test_predict.py)."""
    rc = main(
        [
            "run",
            "ldp-vfl",
            "--release-schedule",
            "release-once",
            "--model",
            "mlp",
            "--dataset",
            "breast",
            "--epsilon",
            "4",
            "--seed",
            "1",
            "--checkpoint-every",
            "1",
            "--checkpoint",
            str(tmp_path / "ck"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "method 'ldp-vfl'" in err[0] and "release-once" in err[0]
    assert not (tmp_path / "ck").exists()


AFE = {**LDP, "method": "afe-vfl", "epochs": 4, "epsilon": 4.0}


def _afe_resumed(tmp_path: Path, args: dict) -> tuple[dict, dict]:
    """A whole run checkpointing every epoch, then a resume from its last checkpoint (epoch 3
    of 4: the last epoch and the scoring run again)."""
    spec = build_spec(dict(args))
    ck = tmp_path / "ck"
    whole = securevfl.run_experiment(
        spec, checkpoints=make_checkpoints(spec, every=1, directory=str(ck), resume=None)
    )
    return whole, _resume(args, ck)


def test_afe_reproduction_mode_resume_restores_rescaling_and_noise_positions(tmp_path):
    """afe-vfl (split schedule, variant full: rescaling and contrastive terms, DP-SGD
    bottoms): the three noise streams skip their saved counts and the rescaling state comes
    back, so the model, metrics, release list and the rescale factors are the whole run's."""
    whole, resumed = _afe_resumed(tmp_path, {**AFE, "reproducible_noise": True})
    _same_run(whole, resumed)
    for key in ("rescale_factor", "fcm_kept_fraction"):
        assert resumed["extra"][key] == whole["extra"][key]


def test_afe_csprng_resume_composes_the_last_epoch_and_scoring_again(tmp_path):
    """Exact bottoms: every passive party's embedding line grows by one use of every training
    and test row, its statistics line by one epoch's batches; ε is that list's Gaussian-DP
    composition (independent)."""
    whole, resumed = _afe_resumed(tmp_path, {**AFE, "options": {"bottom": "exact"}})
    assert resumed["privacy"]["resumed"]["epochs_re_released"] == 1
    assert resumed["privacy"]["resumed"]["scorings_re_released"] == 1
    before = {(r["party"], r["noise_multiplier"]): r["count"] for r in whole["privacy"]["releases"]}
    after = {
        (r["party"], r["noise_multiplier"]): r["count"] for r in resumed["privacy"]["releases"]
    }
    assert before.keys() == after.keys()
    n_batches = -(-whole["n_train"] // 64)  # the split-NN default batch size
    for party in (0, 1):
        diffs = sorted(after[key] - before[key] for key in before if key[0] == party)
        assert diffs == sorted([whole["n_train"] + whole["n_test"], n_batches])
    delta = whole["privacy"]["delta"]
    mu = {p: np.sqrt(sum(n / nm**2 for (q, nm), n in after.items() if q == p)) for p in (0, 1)}
    expect = max(_gdp_epsilon(m, delta) for m in mu.values())
    assert resumed["privacy"]["epsilon"] == pytest.approx(expect, rel=1e-6)
    assert resumed["privacy"]["epsilon"] > whole["privacy"]["epsilon"]


@pytest.mark.parametrize(
    "center,dp_bounds,expect", [(False, (0, 1), 2), (True, (), 2), (False, (), 0)]
)
def test_a_resume_counts_every_earlier_runs_pre_training_releases(
    tmp_path, center, dp_bounds, expect
):
    """Each earlier start on a checkpoint directory released its centring means and, in a csv
    run without --bounds, its DP scaling ranges, under fresh noise: both are counted again."""
    from types import SimpleNamespace

    from securevfl.model.checkpoint_privacy import PrivateResume

    spec = build_spec({**HDP, "epsilon": 1.0, "center": center})
    (tmp_path / "party_0").mkdir()
    (tmp_path / "party_0" / "started.log").write_text("start\nepoch 0\nstart\n")
    ck = SimpleNamespace(resume=True, root=tmp_path)
    ctx = SimpleNamespace(spec=spec, audit=None, info=SimpleNamespace(dp_bounds=dp_bounds))
    assert PrivateResume(ck, ctx, hooks=None, ledger=None, parties=[0]).earlier == expect
