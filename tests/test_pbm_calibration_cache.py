"""PBM-VFL's beta calibration cache: a hit gives the accountant's own epsilon, a bad entry is
recomputed (never trusted), and the key covers every input."""

import json
from pathlib import Path

import pytest
from dp_accounting import dp_event

import securevfl.privacy.pbm_calibration as pc
from securevfl.privacy import calibration_cache
from securevfl.privacy.pbm_accountant import pbm_epsilon

# small enough to calibrate in about a second: N = b M = 16 trials
ARGS = dict(b=8, n_parties=2, dim=2, uses=3, delta=1e-5)
TARGET = 1.0


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(calibration_cache.ENV_VAR, str(tmp_path))
    return tmp_path / "pbm-beta"


@pytest.fixture
def evals(monkeypatch):
    """Counts the accountant evaluations calibrate_beta makes."""
    calls = []
    real = pc.pbm_epsilon

    def counted(*a, **k):
        calls.append((k["b"], k["beta"]))
        return real(*a, **k)

    monkeypatch.setattr(pc, "pbm_epsilon", counted)
    return calls


def _eps(b: int, beta: float, **extra) -> float:
    """The uncalibrated accountant evaluation, independent of the cache."""
    args = {**ARGS, "b": b}
    return pbm_epsilon("party-row", beta=beta, kind="rdp", **args, **extra)


def _entry(cache: Path) -> Path:
    (path,) = cache.glob("*.json")
    return path


def test_hit_gives_the_accountants_epsilon_in_one_evaluation(cache, evals):
    b, beta = pc.calibrate_beta(TARGET, **ARGS)
    searched = len(evals)
    assert searched >= 2  # a search (a lookup evaluates once)
    doc = json.loads(_entry(cache).read_text())
    assert doc["b"] == b and doc["level"] / 4096 == beta
    eps = _eps(b, beta)
    assert doc["epsilon"] == eps and 0.98 * TARGET <= eps <= TARGET
    evals.clear()
    assert pc.calibrate_beta(TARGET, **ARGS) == (b, beta)
    assert evals == [(b, beta)]  # the one re-check at the cached beta, no search


@pytest.mark.parametrize(
    "tamper",
    [
        # a larger beta, its epsilon left as the old one: the re-check sees eps > stored
        lambda d: {**d, "level": d["level"] + 40},
        # a larger beta with an epsilon claimed to meet the target
        lambda d: {**d, "level": 1024, "epsilon": TARGET},
        lambda d: {**d, "b": d["b"] + 1},  # more trials than asked
        lambda d: {**d, "level": 0},
        lambda d: {**d, "level": "52"},
        lambda d: {**d, "key": "0" * 64},  # another entry's content
    ],
)
def test_tampered_entry_is_recomputed(cache, evals, tamper):
    fresh = pc.calibrate_beta(TARGET, **ARGS)
    path = _entry(cache)
    good = json.loads(path.read_text())
    path.write_text(json.dumps(tamper(good)))
    evals.clear()
    assert pc.calibrate_beta(TARGET, **ARGS) == fresh
    assert len(evals) > 2  # searched again
    assert json.loads(path.read_text()) == good  # and the entry repaired


@pytest.mark.parametrize("raw", [b"", b"{not json", b"[1, 2]", b'{"epsilon": NaN}', b" " * 5000])
def test_unreadable_entry_is_a_miss(cache, raw):
    fresh = pc.calibrate_beta(TARGET, **ARGS)
    path = _entry(cache)
    path.write_bytes(raw)
    assert pc.calibrate_beta(TARGET, **ARGS) == fresh
    assert json.loads(path.read_text())["level"] / 4096 == fresh[1]


def test_key_covers_every_input(cache):
    pc.calibrate_beta(TARGET, **ARGS)
    grad = dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(20.0), 3)
    b, beta = pc.calibrate_beta(TARGET, **ARGS, extra_events=(grad,))
    pc.calibrate_beta(TARGET, **{**ARGS, "delta": 1e-6})
    assert len(list(cache.glob("*.json"))) == 3
    eps = _eps(b, beta, extra_events=(grad,))  # the cached answer composes the extra events
    assert 0.98 * TARGET <= eps <= TARGET


def test_off_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(calibration_cache.ENV_VAR, "off")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert calibration_cache.cache_dir() is None
    pc.calibrate_beta(TARGET, **ARGS)
    assert not any(tmp_path.rglob("*.json"))


def test_default_dir_follows_xdg(tmp_path, monkeypatch):
    monkeypatch.delenv(calibration_cache.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert calibration_cache.cache_dir() == tmp_path / "securevfl"


def test_the_test_row_beta_is_cached_checked_and_recomputed_when_tampered(tmp_path, monkeypatch):
    """pbm-vfl's test-row beta (release-once): a second call reuses the entry after one fresh
    evaluation; an entry whose level would overshoot the target is recomputed, never used."""
    import securevfl.privacy.pbm_accountant as pa
    from securevfl.methods.pbm_release_once import calibrate_test_beta

    monkeypatch.setenv(calibration_cache.ENV_VAR, str(tmp_path))
    calls = []
    real = pa.pbm_epsilon

    def counted(*a, **k):
        calls.append(k["beta"])
        return real(*a, **k)

    monkeypatch.setattr(pa, "pbm_epsilon", counted)
    args = dict(b=8, n_parties=2, dim=1, delta=1e-5, floor=8 / 4096)
    first = calibrate_test_beta(2.0, **args)
    searched = len(calls)
    assert searched >= 2 and real("party-row", b=8, beta=first, n_parties=2, dim=1, uses=1,
                                  delta=1e-5, kind="pld") <= 2.0  # fmt: skip
    calls.clear()
    assert calibrate_test_beta(2.0, **args) == first and len(calls) == 1  # the check only
    (entry,) = (tmp_path / "pbm-test-beta").glob("*.json")
    doc = json.loads(entry.read_text())
    doc["level"] = 1024  # beta 1/4: far above the target, with the old epsilon kept
    entry.write_text(json.dumps(doc))
    calls.clear()
    assert calibrate_test_beta(2.0, **args) == first and len(calls) > 1  # recomputed


def test_the_shipped_table_covers_the_compare_suites_breast_cell(cache, evals):
    """The shipped entries (``calibrations.json``) are of the current code: the compare suite's
    breast cell calibrates without a search on an empty cache (one check per calibration).
    Fails after a change to the accountant's code: regenerate them (tools/ship_calibrations.py)."""
    from securevfl.experiment import run_experiment
    from securevfl.run_options import build_spec

    # the cell of bench/suites/compare.toml, with the method's defaults as the CLI builds them
    spec = build_spec({"method": "pbm-vfl", "dataset": "breast", "seed": 0, "epsilon": 8.0})
    rec = run_experiment(spec)
    assert not any(cache.glob("*.json"))  # nothing computed, so nothing stored
    # the test rows' beta too (pbm-test-beta): a stale entry there searched for 29 CPU-s
    assert not any((cache.parent / "pbm-test-beta").glob("*.json")), "stale: ship_calibrations"
    assert 1 <= len(evals) <= 2, "shipped calibrations are stale: run tools/ship_calibrations.py"
    assert rec["privacy"]["epsilon"] <= 8.0


def test_a_shipped_entry_is_checked_like_any_other(cache, evals, monkeypatch):
    """A shipped entry that does not meet the target is not used: the search runs."""
    fresh = pc.calibrate_beta(TARGET, **ARGS)
    (path,) = cache.glob("*.json")
    doc = json.loads(path.read_text())
    path.unlink()
    bad = {**doc, "level": doc["level"] + 40}  # a larger beta under the old epsilon
    monkeypatch.setattr(calibration_cache, "_shipped", lambda: {"pbm-beta": {path.stem: bad}})
    evals.clear()
    assert pc.calibrate_beta(TARGET, **ARGS) == fresh and len(evals) > 2
    monkeypatch.setattr(calibration_cache, "_shipped", lambda: {"pbm-beta": {path.stem: doc}})
    path.unlink()
    evals.clear()
    assert pc.calibrate_beta(TARGET, **ARGS) == fresh and len(evals) == 1  # a good one is used


def test_a_long_calibration_says_what_it_computes_while_it_runs(monkeypatch, tmp_path):
    import threading

    from securevfl.privacy.calibration_cache import progress

    monkeypatch.setenv("SECUREVFL_CACHE_DIR", str(tmp_path))
    lines, beat = [], threading.Event()

    def write(line):
        lines.append(line)
        beat.set()

    with progress("pbm-vfl: calibrating beta", every=0.01, write=write):
        assert beat.wait(30)  # the body outlasts one interval: a line while it runs
    assert lines[0].startswith("securevfl: pbm-vfl: calibrating beta: ")
    assert f"kept in {tmp_path}" in lines[0]
    assert "done in" in lines[-1]
    quiet = []
    with progress("a cache hit", every=60.0, write=quiet.append):
        pass
    assert quiet == []  # a step that returns at once prints nothing
