"""secureboost-dp's release audit (issue 46): the probe reads what the label holder decrypts,
the honest run's bound stays below its ε, noise / 4 is caught; and its ceiling."""

from __future__ import annotations

import numpy as np
import pytest

from protocols import paillier_he as ph
from securevfl.audit import AuditConfig, audit
from securevfl.methods import secureboost_protocol as sp
from securevfl.run_options import build_spec

SMALL = dict(method="secureboost-dp", dataset="breast", parties=2, delta=1e-5, seed=0,
             trees=1, depth=2, bins=4, paillier_bits=512)  # fmt: skip


def test_decrypted_noisy_bin_sums_are_the_probes_plaintext():
    """The probe draws ``noise_slots`` in the clear: the encrypted path (pack, re-randomise,
    add the noise under encryption, decrypt, unpack) gives the same numbers, value for value,
    from the same seeded generator."""
    pub, priv = ph.generate_keypair(512)
    c = sp.Crypto(pub, priv)
    rng = np.random.default_rng(3)
    n, F, nb = 12, 3, 4
    g, h = rng.uniform(-1, 1, n), rng.uniform(0, 0.25, n)
    bins = rng.integers(0, nb, size=(n, F))
    node = rng.integers(-1, 2, size=n)
    cts = ph.from_bytes(pub, sp.encrypt_gradients(c, g, h))
    reply = sp.bin_sums(c, cts, bins, node, 2, nb, (np.random.default_rng(7), 5.0, 1.25))
    opened = sp.open_sums(c, reply, 2, F, nb)
    gi, hi = (np.rint(v * 2.0**sp.FRAC_BITS) / 2.0**sp.FRAC_BITS for v in (g, h))
    exact = sp.own_sums(bins, gi, hi, node, 2, nb)
    noise = sp.noise_slots((np.random.default_rng(7), 5.0, 1.25), 2 * F * nb)
    noise = noise.reshape(2, F, nb, 2).transpose(3, 0, 1, 2) / 2.0**sp.FRAC_BITS
    assert np.array_equal(opened, exact + noise)


@pytest.fixture(scope="module")
def boost_audit():
    """ε = 1, one tree of depth 2 (two partner releases of 15 columns), 16,000 trials."""
    spec = build_spec({**SMALL, "epsilon": 1.0})
    return audit(spec, AuditConfig(trials=16_000), variants=(4.0,))


def test_audit_holds_at_eps1_and_catches_noise_over_4(boost_audit):
    rec = boost_audit
    assert rec["audit"] == "release" and rec["release_view"] == "whole run"
    assert "bin sums the label holder decrypts" in rec["view"]["describe"]
    assert rec["result"]["view_size"] == 2 * 15 * 4  # releases x columns x (g, h) x 2 bins
    assert rec["trees"] == 1 and rec["epochs"] is None
    assert rec["claimed_epsilon"] <= 1.0 + 1e-9
    assert rec["epsilon_lower_bound"] < rec["claimed_epsilon"]
    (v,) = rec["variants"]
    assert v["violation"] and v["epsilon_lower_bound"] > rec["claimed_epsilon"]


def test_noise_switched_off_the_probe_is_the_canary_at_the_accountants_sensitivity():
    """Noise / 1e9: the release is the canary's (C_g, C_h) in bin 0 or bin 1; its L2 difference
    in σ-normalised units is the accountant's sensitivity 2 sqrt(columns)."""
    from securevfl.audit.release import whole_run_probe
    from securevfl.context import AuditTap
    from securevfl.experiment import run_experiment
    from securevfl.privacy.boost_dp import level_sensitivity
    from securevfl.runtime.inprocess import InProcessRuntime

    spec = build_spec({**SMALL, "epsilon": 1.0})
    tap = AuditTap(noise_divisor=1e9)
    with InProcessRuntime(2) as rt:
        run_experiment(spec, rt, audit=tap)
    probe = whole_run_probe("secureboost-dp", tap.seen, tap.facts)
    got = probe.draw(np.array([0, 1]))
    assert np.allclose(got[1] - got[0], probe.direction, atol=1e-6)
    per_release = probe.direction[: len(probe.direction) // 2].reshape(15, 2, 2)
    normalised = per_release / np.array([1.0, 0.25])  # g / C_g, h / C_h
    assert np.linalg.norm(normalised) == pytest.approx(level_sensitivity(15))


def test_run_view_is_refused_with_one_line(capsys):
    from bench.cli import main

    argv = ["audit", "secureboost-dp", "--epsilon", "1", "--trees", "1", "--view", "run"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "view release" in err[0]


def test_ceiling_is_the_noise_removed_twin_in_the_record_and_both_reports(tmp_path):
    """secureboost-dp's record names its ceiling (secureboost, same settings); the report
    section and report.html's ceilings table read it from the twin's record (any key size)."""
    import securevfl
    from bench.report_sections import ceilings_table
    from bench.reports import secureboost as section

    fast = {"dataset": "breast", "seed": 3, "trees": 3, "depth": 2}
    plain = securevfl.run_experiment(build_spec({"method": "secureboost", **fast,
                                                 "paillier_bits": 256}))  # fmt: skip
    dp = securevfl.run_experiment(build_spec({"method": "secureboost-dp", **fast,
                                              "paillier_bits": 512, "epsilon": 8.0}))  # fmt: skip
    assert dp["extra"]["ceiling"]["kind"] == "noise removed"
    assert "ceiling" not in plain["extra"]
    want = f"{plain['metrics']['accuracy']:.4f}"
    row = next(x for x in section.render([plain, dp], tmp_path).splitlines() if "ε = 8" in x)
    assert row.split("|")[5].strip() == want
    row = next(x for x in section.render([dp], tmp_path).splitlines() if "ε = 8" in x)
    assert row.split("|")[5].strip() == "not run"
    html = "".join(ceilings_table([plain, dp]))
    assert "noise removed" in html and f"{plain['metrics']['accuracy']:.3f}" in html
