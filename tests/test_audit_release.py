"""The release-step audit: its statistics against independent computations, the acceptance
commands (bound <= claim; noise/10 caught for hdp-vfl and ldp-vfl), and the audit's walls
(under-noising reachable from ``audit`` only; one-line errors)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from bench.cli import main
from bench.reports.audit import render
from bench.suites import load_suite
from securevfl.audit import epsilon_lower_bound
from securevfl.audit.release import release_probe
from securevfl.audit.release_audit import held_out_bound
from securevfl.audit.stats import best_threshold
from securevfl.context import AuditTap
from securevfl.experiment import run_experiment
from securevfl.run_options import build_spec
from securevfl.runtime.inprocess import InProcessRuntime

ROOT = Path(__file__).resolve().parents[1]


def gdp_epsilon(mu: float, delta: float) -> float:
    """ε(δ) of μ-Gaussian DP (Dong, Roth & Su 2019, Cor. 2.13), solved by bisection: an
    independent computation of the largest ε a Gaussian release of this μ can show."""

    def d(eps: float) -> float:
        return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(
            -eps / mu - mu / 2
        )

    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if d(mid) < delta else (mid, hi)
    return hi


def test_best_threshold_is_the_brute_force_maximum():
    rng = np.random.default_rng(0)
    s0, s1 = rng.normal(0, 1, 3000), rng.normal(2.0, 1, 3000)
    t = best_threshold(s0, s1, delta=1e-5, alpha=0.05)

    def bound(th: float) -> float:
        fp, fn = int(np.sum(s0 > th)), int(np.sum(s1 <= th))
        return epsilon_lower_bound(fp, 3000, fn, 3000, delta=1e-5, alpha=0.05)

    grid = np.quantile(np.concatenate([s0, s1]), np.linspace(0, 1, 400))
    assert bound(t) == pytest.approx(max(bound(g) for g in grid))
    assert bound(t) > bound(1.0)  # a tail threshold beats the midpoint for shifted Gaussians


@pytest.mark.parametrize("mu", [0.5, 2.0, 5.0])
def test_held_out_bound_stays_below_the_gaussian_truth(mu):
    rng = np.random.default_rng(1)
    worlds = rng.permutation(np.arange(40_000) % 2)
    scores = rng.normal(0, 1, len(worlds)) + mu * worlds
    got = held_out_bound(worlds, scores, delta=1e-5, alpha=0.05)
    truth = gdp_epsilon(mu, 1e-5)
    assert got["epsilon_lower_bound"] <= truth
    if mu == 2.0:  # power: a μ = 2 Gaussian (ε ≈ 11 at δ = 1e-5) is seen far above ε = 1
        assert got["epsilon_lower_bound"] > 2.0
    if mu == 5.0:  # μ = 5 (ε ≈ 33): the bound reaches what 20,000 held-out trials can show
        assert got["epsilon_lower_bound"] >= 0.95 * got["largest_detectable_epsilon"]
    assert got["fit_trials"] == 20_000
    assert got["test"]["negatives"] + got["test"]["positives"] == 20_000


def _audit_cli(capsys, method: str, eps: str, *extra: str) -> dict:
    argv = ["audit", method, "--dataset", "breast", "--parties", "2", "--epsilon", eps,
            "--delta", "1e-5", "--seed", "0", "--json", *extra]  # fmt: skip
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def hdp_record():
    """The acceptance command for hdp-vfl at ε = 1 (variants 2, 4, 10: the default)."""
    cap = pytest.MonkeyPatch()
    import io
    import sys

    buf = io.StringIO()
    cap.setattr(sys, "stdout", buf)
    try:
        argv = ["audit", "hdp-vfl", "--dataset", "breast", "--parties", "2", "--epsilon",
                "1", "--delta", "1e-5", "--seed", "0", "--json"]  # fmt: skip
        assert main(argv) == 0
    finally:
        cap.undo()
    return json.loads(buf.getvalue())


def test_acceptance_hdp_vfl_eps1_holds_and_noise_over_10_is_caught(hdp_record):
    rec = hdp_record
    assert rec["audit"] == "release"
    assert rec["claimed_epsilon"] == pytest.approx(1.0, rel=1e-6)
    assert 0.0 <= rec["epsilon_lower_bound"] <= rec["claimed_epsilon"]
    assert "intermediate result" in rec["view"]["describe"]
    by = {v["noise_divisor"]: v for v in rec["variants"]}
    assert set(by) == {2.0, 4.0, 10.0}
    assert by[10.0]["violation"] and by[10.0]["epsilon_lower_bound"] > 1.0
    assert rec["largest_detectable_epsilon"] > 8.0  # power: 100,000 trials


@pytest.mark.slow
def test_acceptance_ldp_vfl_eps1_holds_and_noise_over_10_is_caught(capsys):
    rec = _audit_cli(capsys, "ldp-vfl", "1", "--variants", "10", "--trials", "40000")
    assert "embedding of the canary row" in rec["view"]["describe"]
    assert rec["epsilon_lower_bound"] <= rec["claimed_epsilon"]
    (v,) = rec["variants"]
    assert v["violation"] and v["epsilon_lower_bound"] > rec["claimed_epsilon"]


def test_whole_run_view_catches_the_family_holding_the_largest_share(capsys):
    """Issue 42 item 7: ldp-vfl at ε = 1, a variant dividing by 4 only the noise of its bottoms'
    DP-SGD releases (50 releases, the larger share of μ², not the embedding the audit used to
    tap): the whole-run view sees every release of the canary and bounds ε above 1; the honest
    run stays below."""
    rec = _audit_cli(capsys, "ldp-vfl", "1", "--variants", "4", "--trials", "40000",
                     "--variant-family", "release-once/bottom")  # fmt: skip
    assert rec["release_view"] == "whole run" and "DP-SGD releases" in rec["view"]["describe"]
    assert rec["epsilon_lower_bound"] < 1.0 <= rec["claimed_epsilon"] + 1e-3
    (v,) = rec["variants"]
    assert v["noise_family"] == "release-once/bottom"
    assert v["violation"] and v["epsilon_lower_bound"] > 1.0


@pytest.mark.slow
def test_the_one_release_view_misses_what_the_whole_run_catches(capsys):
    """The contrast: tapping only the embedding, the same bottoms-only variant goes uncaught;
    hdp-vfl's largest family (its per-step stream, which shares a generator with the scoring
    weights) divided by 4 is caught by the whole-run view."""
    bottoms = ["--variant-family", "release-once/bottom", "--view", "one-release"]
    rec = _audit_cli(capsys, "ldp-vfl", "1", "--variants", "4", "--trials", "40000", *bottoms)
    assert not rec["variants"][0]["violation"]
    rec = _audit_cli(capsys, "hdp-vfl", "1", "--variants", "4", "--trials", "40000",
                     "--variant-family", "hdp/")  # fmt: skip
    assert rec["epsilon_lower_bound"] < 1.0 < rec["variants"][0]["epsilon_lower_bound"]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["hdp-vfl", "ldp-vfl"])
def test_acceptance_eps8_holds(capsys, method):
    rec = _audit_cli(capsys, method, "8", "--variants", "none")
    assert rec["claimed_epsilon"] == pytest.approx(8.0, rel=1e-3)
    assert rec["epsilon_lower_bound"] <= rec["claimed_epsilon"]


def test_noise_switched_off_release_is_the_canary_at_the_accountants_bound():
    """With the noise divided by 1e9 the hdp-vfl release is the canary's noiseless value ±k,
    and that value's difference 2k is the per-row part of the plan's first-epoch sensitivity:
    the audit's canary is inside what the accountant covers (the bound it gives is valid)."""
    spec = build_spec(dict(method="hdp-vfl", dataset="breast", parties=2, epsilon=1.0,
                           delta=1e-5, seed=0, epochs=2))  # fmt: skip
    tap = AuditTap(noise_divisor=1e9)
    with InProcessRuntime(2) as rt:
        run_experiment(spec, rt, audit=tap)
    probe = release_probe("hdp-vfl", tap.seen)
    _, hooks = tap.seen[-1]
    got = probe.draw(np.array([0, 1, 1]))
    k = hooks.clip
    assert got.shape == (3, 2) and np.allclose(got, [[-k, -k], [k, k], [k, k]], atol=1e-6)
    assert 2 * k <= hooks.plan.passive_epochs[0] + 1e-12


def test_under_noising_is_reachable_from_audit_only(capsys):
    # run has neither flag; and only the audit package ever builds an AuditTap
    for flag in (["--variants", "10"], ["--view", "release"]):
        assert main(["run", "hdp-vfl", "--parties", "2", "--epsilon", "1", *flag]) == 2
        assert "unrecognized arguments" in capsys.readouterr().err
    builders = sorted(
        str(p.relative_to(ROOT))
        for top in ("securevfl", "baselines", "bench")
        for p in (ROOT / top).rglob("*.py")
        if "AuditTap(" in p.read_text() and p.name != "context.py"
    )
    assert builders == ["securevfl/audit/release_audit.py", "securevfl/audit/run.py"]


def test_release_view_refused_where_there_is_none(capsys):
    argv = ["audit", "fm-vfl", "--parties", "2", "--epsilon", "1", "--view", "release"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "view 'release'" in err[0] and "Traceback" not in err[0]


def test_audit_suite_covers_every_dp_method_and_the_report_shows_it(hdp_record, tmp_path):
    suite = load_suite(str(ROOT / "bench/suites/audit.toml"))
    audited = {c.spec.method for c in suite.cells if c.audit}
    assert audited == {"hdp-vfl", "fm-vfl", "fm-central", "dpsgd-c", "afe-vfl", "ldp-vfl",
                       "pbm-vfl", "vafl-dp", "opacus-dpsgd", "secureboost-dp"}  # fmt: skip
    assert "audit" in suite.extras
    md = render([hdp_record, {"method": "vfl", "metrics": {}}], tmp_path)
    row = next(line for line in md.splitlines() if line.startswith("| breast | hdp-vfl"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == "1.00" and float(cells[4]) <= 1.0
    assert "**caught**" in cells[7]  # noise/10
    assert "intermediate result" in md


def test_bench_audit_cell_lands_in_the_report(tmp_path):
    """An audit cell of a suite runs through ``securevfl bench`` and its report section."""
    suite = tmp_path / "mini-audit.toml"
    suite.write_text(
        'name = "mini-audit"\nseeds = [0]\n[[cells]]\naudit = "release/4000"\n'
        'method = "hdp-vfl"\ndataset = "breast"\nparties = 2\nepsilon = 1.0\n'
        'delta = 1e-5\nepochs = 2\n[report]\nextras = ["audit"]\n'
    )
    out = tmp_path / "out"
    assert main(["bench", "--suite", str(suite), "--out", str(out), "--no-progress"]) == 0
    rec = json.loads((out / "results.jsonl").read_text().splitlines()[-1])
    assert rec["audit"] == "release" and rec["result"]["trials"] == 4000
    assert [v["noise_divisor"] for v in rec["variants"]] == [2.0, 4.0, 10.0]
    md = (out / "report.md").read_text()
    assert "## Privacy audit" in md and "| breast | hdp-vfl | release | 1.00 |" in md
    html = (out / "report.html").read_text()
    assert "Privacy audit" in html
    # and in report.html's privacy section, beside the claims
    audits = html[html.index("<h3>Audits</h3>") :]
    assert "<td>hdp-vfl</td>" in audits[: audits.index("</table>")]
