"""The perf harness (issue 29, item 5): job files, interleaved runs, medians and ratios, failed
runs, peer environments and the "Performance against peers" report section.

These test the HARNESS, not a peer: the stand-in jobs' "theirs" command is a Python one-liner run
by the project's own interpreter, given as the peer environment's interpreter through
SECUREVFL_PEER_PYTHON_<NAME>, with a stand-in peer declared in a temporary envs.toml. Nothing is
installed and no peer library runs (except one real, offline `python -m venv` + pip failure)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

import bench.perf_jobs as perf_jobs
from bench.cli import main
from bench.peer_envs import STAMP, PeerEnvError, ensure_peer, override_var
from bench.perf import parse_result, read_perf, run_command, run_perf
from bench.perf_jobs import PeerEnv, PerfJob, select_jobs
from bench.suites import load_suite
from securevfl.errors import ConfigError

STAND_IN = PeerEnv("stand-in", ("nothing-installed",), module="json", distribution="numpy")
# one run of a stand-in side: append the side to LOG, report the next of its SECONDS
ONE_RUN = (
    "import json, sys; side, log, secs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]); "
    "f = open(log, 'a+'); f.seek(0); i = f.read().split().count(side); f.write(side + ' '); "
    "print('warming up'); "
    "print(json.dumps({'seconds': secs[i], 'peak_mb': 10.0 * (i + 1), 'bytes': 1000, "
    "'version': side + ' 1.0', 'exact': True, 'detail': {'i': i}}))"
)


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """A peer 'stand-in' whose interpreter is this one (nothing installed)."""
    envs = tmp_path / "envs.toml"
    envs.write_text(
        '[stand-in]\nrequirements = ["nothing-installed"]\nmodule = "json"\n'
        'distribution = "numpy"\n'
    )
    monkeypatch.setattr(perf_jobs, "ENVS_FILE", envs)
    monkeypatch.setenv(override_var("stand-in"), sys.executable)
    return tmp_path


def _job_toml(log: Path, ours: list[float], theirs: list[float], goal: float = 3.0) -> str:
    def cmd(py: str, side: str, secs: list[float]) -> str:
        return json.dumps([py, "-c", ONE_RUN, side, str(log), json.dumps(secs)])

    return (
        f'[[perf]]\nname = "stand-in-job"\ntitle = "harness test: stand-in commands"\n'
        f'goal = {goal}\npeer = "stand-in"\ntimeout_s = 60\n'
        f"ours = {cmd('{python}', 'ours', ours)}\n"
        f"theirs = {cmd('{peer_python}', 'theirs', theirs)}\n"
    )


def test_interleaved_runs_median_ratio_and_report(stand_in, capsys):
    """ours, theirs, ours, theirs, ...; medians of each side; ratio theirs / ours; the table."""
    log = stand_in / "order.log"
    suite = stand_in / "p.toml"
    suite.write_text(_job_toml(log, [1.0, 5.0, 2.0], [9.0, 5.0, 8.0]))  # medians 2, 8
    out = stand_in / "out"
    assert main(["bench", "--suite", str(suite), "--out", str(out), "--no-progress"]) == 0
    assert log.read_text().split() == ["ours", "theirs"] * 3
    (rec,) = read_perf(out)
    assert rec["order"] == ["ours", "theirs"] * 3
    assert rec["ours"]["median_s"] == 2.0 and rec["theirs"]["median_s"] == 8.0
    assert rec["ratio"] == pytest.approx(4.0) and rec["met"] is True
    assert rec["ours"]["peak_mb"] == 30.0 and rec["theirs"]["bytes"] == 1000
    assert rec["peer_env"]["how"] == override_var("stand-in")
    assert all(len(r["load_before"]) == 3 for r in rec["ours"]["per_run"])
    assert rec["machine"]["cores"] and rec["commands"]["theirs"].startswith(sys.executable)
    md = (out / "report.md").read_text()
    assert "## Performance against peers" in md and (out / "perf_ratios.png").is_file()
    row = next(ln for ln in md.splitlines() if ln.startswith("| stand-in-job |"))
    assert "| ≥ 3× | 2.000 | 8.000 | 4.00× | yes | 30 / 30 | 1,000 / 1,000 |" in row
    html = (out / "report.html").read_text()
    assert '<a href="#peers">Performance against peers</a>' in html  # linked from the top
    assert '<details id="peers" open><summary>Performance against peers' in html
    assert "stand-in-job" in html and "<td>4.00×</td>" in html
    assert "ours 1.0" in html and "theirs 1.0" in html  # both sides' versions
    # --perf-runs overrides the job's runs; a rerun replaces the job's line
    log.unlink()
    argv = ["bench", "--suite", str(suite), "--out", str(out), "--perf-runs", "1"]
    assert main([*argv, "--perf-jobs", "stand-in-job"]) == 0
    (rec,) = read_perf(out)
    assert rec["order"] == ["ours", "theirs"] and rec["ratio"] == pytest.approx(9.0)


def test_a_goal_not_met_and_an_informational_job(stand_in):
    log = stand_in / "o.log"
    suite = stand_in / "p.toml"
    suite.write_text(_job_toml(log, [2.0], [3.0], goal=2.0))
    (job,) = load_suite(str(suite)).perf
    run_perf([job], stand_in / "out", runs=1, log=lambda _: None)
    (rec,) = read_perf(stand_in / "out")
    assert rec["ratio"] == pytest.approx(1.5) and rec["met"] is False
    log.unlink()
    info = PerfJob(**{**job.__dict__, "goal": None})
    run_perf([info], stand_in / "out", runs=1, log=lambda _: None)
    assert read_perf(stand_in / "out")[0]["met"] is None
    # a fast wrong answer meets no goal: our output reported not exact
    log.unlink()
    wrong = ("{python}", "-c", 'print(\'{"seconds": 0.1, "exact": false}\')')
    job = PerfJob(**{**job.__dict__, "ours": wrong})
    run_perf([job], stand_in / "out", runs=1, log=lambda _: None)
    (rec,) = read_perf(stand_in / "out")
    assert rec["ratio"] == pytest.approx(30.0) and rec["met"] is None
    assert rec["ours"]["exact"] is False


@pytest.mark.parametrize(
    "theirs, why",
    [
        ("import sys; print('boom', file=sys.stderr); sys.exit(3)", "exit code 3"),
        ("print('no json here')", "the last stdout line is not JSON"),
        ('print(\'{"seconds": -1, "version": "x"}\')', "seconds must be a finite number > 0"),
        ("import time; time.sleep(30)", "timed out after 2 s"),
    ],
)
def test_a_failed_run_is_recorded_as_failed(stand_in, capsys, theirs, why):
    log = stand_in / "o.log"
    text = _job_toml(log, [1.0], [1.0]).replace("timeout_s = 60", "timeout_s = 2")
    text = text.split("theirs = ")[0] + f"theirs = {json.dumps(['{peer_python}', '-c', theirs])}\n"
    suite = stand_in / "p.toml"
    suite.write_text(text)
    out = stand_in / "out"
    assert main(["bench", "--suite", str(suite), "--out", str(out), "--perf-runs", "1"]) == 1
    (rec,) = read_perf(out)
    (run,) = rec["theirs"]["per_run"]
    assert why in run["failed"] and "seconds" not in run
    assert rec["theirs"]["median_s"] is None and rec["ratio"] is None and rec["met"] is None
    if "boom" in theirs:
        assert "boom" in run["stderr_tail"]
    md = (out / "report.md").read_text()
    assert "not judged (a run failed)" in md and f"failed: {why}" in md
    assert "1 of 1 theirs runs failed" in capsys.readouterr().out + md


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda t: t + 'colour = "red"\n', "unknown key 'colour'"),
        (lambda t: t.replace("goal = 3.0\n", ""), None),  # informational: fine
        (lambda t: t.replace('title = "harness test: stand-in commands"\n', ""), "key 'title'"),
        (lambda t: t.replace('peer = "stand-in"', 'peer = "nope"'), "peer in perf job"),
        (lambda t: t.replace("goal = 3.0", "goal = -1"), "goal in perf job"),
        (lambda t: t.replace("timeout_s = 60", "timeout_s = true"), "timeout_s in perf job"),
        (lambda t: t.replace('"{python}"', '"{pyhton}"'), "'{pyhton}'"),
        (lambda t: t.replace('name = "stand-in-job"', 'name = "Bad Name"'), "name in perf job"),
        (lambda t: t + t.replace("title = ", "runs = 2\ntitle = "), "must be unique"),
        (lambda t: t.replace("ours = ", "ours = []\nx = "), "unknown key 'x'"),
        (lambda t: 'perf = "x"\n', "perf in"),
    ],
)
def test_job_file_errors_are_one_line_naming_file_and_key(stand_in, capsys, edit, needle):
    (stand_in / "perf.toml").write_text('[[cells]]\nmethod = "vfl"\n')
    (stand_in / "perf.d").mkdir()
    frag = stand_in / "perf.d" / "job.toml"
    frag.write_text(edit(_job_toml(stand_in / "o.log", [1.0], [1.0])))
    if needle is None:
        assert load_suite(str(stand_in / "perf.toml")).perf[0].goal is None
        return
    assert main(["bench", "--suite", str(stand_in / "perf.toml"), "--out", str(stand_in)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and str(frag) in err and len(err.splitlines()) == 1, err


def test_fragment_tables_and_job_selection(stand_in, capsys):
    (stand_in / "perf.toml").write_text('[[cells]]\nmethod = "vfl"\n')
    (stand_in / "perf.d").mkdir()
    (stand_in / "perf.d" / "j.toml").write_text("[[perff]]\nname = 'x'\n")
    with pytest.raises(ConfigError, match="may hold only cells, perf, report, got 'perff'"):
        load_suite(str(stand_in / "perf.toml"))
    (stand_in / "perf.d" / "j.toml").write_text(_job_toml(stand_in / "o.log", [1.0], [1.0]))
    jobs = load_suite(str(stand_in / "perf.toml")).perf
    assert select_jobs(jobs, None) == jobs and select_jobs(jobs, "stand-in-job") == jobs
    with pytest.raises(ConfigError, match="--perf-jobs must name jobs of the suite"):
        select_jobs(jobs, "stand-in-job,nope")
    argv = ["bench", "--suite", str(stand_in / "perf.toml"), "--out", str(stand_in / "o")]
    for extra, needle in (
        (["--perf-runs", "0"], "--perf-runs"),
        (["--perf-jobs", ","], "at least"),
    ):
        assert main(argv + extra) == 2 and needle in capsys.readouterr().err


def test_shipped_suites_jobs_and_peers():
    """The perf suite's jobs load against bench/peers/envs.toml; `make bench` runs none."""
    assert load_suite("default").perf == []
    jobs = load_suite("perf").perf
    assert "fm-product-small" in {j.name for j in jobs}
    envs = perf_jobs.load_envs()
    assert envs["spu"].requirements == ("spu==0.9.5", "numpy<2")
    assert envs["heu"].requirements == ("sf-heu==0.5.2b0", "numpy<2")
    assert all(j.peer in envs for j in jobs)


@pytest.mark.parametrize(
    "line, why",
    [
        ('{"seconds": 1.5, "version": "v", "bytes": 2.5}', "bytes must be int"),
        ('{"seconds": true}', "seconds must be"),
        ('{"seconds": NaN}', "seconds must be"),
        ('{"seconds": 1, "exact": 1}', "exact must be bool"),
        ('{"seconds": 1, "peak_mb": false}', "peak_mb must be int"),
        ("[1]", "must be a JSON object"),
    ],
)
def test_parse_result_refuses_what_the_interface_does_not_allow(line, why):
    with pytest.raises(ValueError, match=why):
        parse_result("log line\n" + line + "\n")
    ok = parse_result('{"seconds": 2, "peak_mb": null, "bytes": 7, "version": "v"}\n\n')
    assert ok["seconds"] == 2.0 and ok["bytes"] == 7 and ok["exact"] is None


def test_peer_env_reused_from_its_stamp_or_refused(tmp_path, monkeypatch):
    """A matching stamp is reused (nothing installed); a foreign directory is never cleared."""
    monkeypatch.setenv("SECUREVFL_PEER_DIR", str(tmp_path))
    monkeypatch.delenv(override_var(STAND_IN.name), raising=False)
    where = tmp_path / STAND_IN.name
    (where / "bin").mkdir(parents=True)
    python = where / "bin" / "python"  # this interpreter, as a venv's bin/python would be
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    from bench.peer_envs import _stamp

    (where / STAMP).write_text(json.dumps(_stamp(STAND_IN)))
    got = ensure_peer(STAND_IN, log=pytest.fail)
    assert got.how == f"reused {where}" and got.version.startswith("numpy ")
    (where / STAMP).write_text("{}")  # requirements changed: reinstall, but not over a stranger
    with pytest.raises(ConfigError, match="must be empty or a virtual environment"):
        ensure_peer(STAND_IN, log=lambda _: None)
    monkeypatch.setenv(override_var(STAND_IN.name), str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="must be an executable Python interpreter"):
        ensure_peer(STAND_IN)


@pytest.mark.slow  # a real `python -m venv` (about 4 s)
def test_pip_failure_is_one_clear_line(tmp_path, monkeypatch):
    """A real venv and a real pip run, offline: an index without the release is one line."""
    monkeypatch.setenv("SECUREVFL_PEER_DIR", str(tmp_path / "peers"))
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    env = PeerEnv("ghost", ("securevfl-no-such-package==0.0.0",), "ghost", "ghost")
    lines: list[str] = []
    with pytest.raises(PeerEnvError) as err:
        ensure_peer(env, log=lines.append)
    msg = str(err.value)
    assert "pip cannot reach the package index or it has no such release" in msg
    assert "securevfl-no-such-package==0.0.0" in msg and "\n" not in msg
    assert override_var("ghost") in msg and "installing peer environment 'ghost'" in lines[0]
    assert not (tmp_path / "peers" / "ghost" / STAMP).exists()  # never reused half-made


def test_a_timeout_ends_the_processes_the_run_started(tmp_path):
    """A party process left behind by a timed-out run would load every later run."""
    pid_file, done = tmp_path / "child.pid", tmp_path / "child.done"
    child = f"import time; time.sleep(60); open({str(done)!r}, 'w')"
    code = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', {child!r}]); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    rec = run_command([sys.executable, "-c", code], 2, dict(os.environ))
    assert rec["failed"] == "timed out after 2 s"
    # the left-behind child would hold stdout open, so the run would end only with it: it
    # would then have finished its work (written `done`); killed, it never does
    assert not done.exists()
    status = Path(f"/proc/{pid_file.read_text()}/status")
    for _ in range(50):  # killed at once; its parent init reaps it shortly after
        if not status.exists() or "State:\tZ" in status.read_text():
            break
        time.sleep(0.1)
    assert not status.exists() or "State:\tZ" in status.read_text()
    assert not done.exists()


def test_cells_then_jobs_and_perf_jobs_alone(stand_in):
    """Without --perf-jobs a suite's cells run and then its jobs; with it, the jobs only."""
    suite = stand_in / "s.toml"
    job = _job_toml(stand_in / "o.log", [1.0], [2.0])
    suite.write_text('[[cells]]\nmethod = "vfl"\nepochs = 1\n' + job)
    out = stand_in / "out"
    argv = ["bench", "--suite", str(suite), "--no-progress", "--perf-runs", "1"]
    assert main([*argv, "--out", str(out)]) == 0
    assert (out / "results.jsonl").read_text().count('"method": "vfl"') == 1
    assert read_perf(out)[0]["ratio"] == pytest.approx(2.0)
    md = (out / "report.md").read_text()
    assert "## Summary" in md and "## Performance against peers" in md
    (stand_in / "o.log").unlink()
    alone = stand_in / "alone"
    assert main([*argv, "--out", str(alone), "--perf-jobs", "stand-in-job"]) == 0
    assert not (alone / "results.jsonl").exists() and read_perf(alone)
    # a perf-only report says what it holds, not "0 runs" (report.md and report.html alike)
    assert "0 runs" not in (alone / "report.md").read_text()
    meta = (alone / "report.html").read_text()
    assert "0 runs" not in meta and "Perf jobs only (perf.jsonl), rendered on" in meta
