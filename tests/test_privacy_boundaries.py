"""Issue 31 / 30.3: a DP record holds only what its writer may see, and every ε covers the run.

- every DP method, run small: the record's fields are on an allow-list (no fingerprint of exact
  weights, no statistic of unreleased values), no data-derived preprocessing is outside the
  guarantee, and a sample-unit ε appears only where the labels are protected;
- ``--seed`` never seeds the noise; ``--reproducible-noise`` does, and then no ε is printed;
- neighbouring datasets: replacing one row moves no other row's scaled features.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import baselines
from securevfl.context import RunSpec
from securevfl.data import domains
from securevfl.data.bounds import read_bounds
from securevfl.data.custom import register_party_arrays
from securevfl.data.preprocess import CategoricalColumn, NumericColumn, encode_columns
from securevfl.disclosure import (
    NOT_A_GUARANTEE,
    UNRELEASED_EXTRA,
    UNRELEASED_STATS,
    UNRELEASED_WARNINGS,
)
from securevfl.errors import ConfigError
from securevfl.experiment import run_experiment
from securevfl.methods import load_all
from securevfl.privacy.centring import (
    CENTRE_SHARE,
    compose_into,
    laplace_scale,
    released_means,
)
from securevfl.privacy.units import LABEL_EXPOSURE
from securevfl.registry import _REGISTRIES
from securevfl.run_options import build_spec

load_all()
baselines.load_all()
ROOT = Path(__file__).resolve().parents[1]

# the record's top-level fields: public facts, costs, metrics, the privacy report
TOP = {
    "alignment", "capabilities", "comm", "config", "dataset", "extra", "family",
    "features_per_party", "fingerprint_withheld", "majority_class_rate", "method", "metrics",
    "model_fingerprint", "n_features", "n_test", "n_train", "noise_generator", "noise_seeded",
    "parties", "privacy",
    "runtime", "stats", "threat_model", "time", "timestamp", "version",
}  # fmt: skip
# run statistics a DP record may hold: timings, memory, public counts, warnings
STATS = {
    "epoch_loss", "epoch_accuracy",  # only where the label holder's rows are outside the unit
    "epoch_s", "epoch_cpu_s", "step_ms", "phases_s", "phases_bytes", "setup_s", "truncated",
    "warnings", "peak_rss_bytes", "start_rss_bytes",
}  # fmt: skip
# each method's ``extra``: public parameters, costs, or values computed from released ones
EXTRA = {
    "hdp-vfl": {"sigma_a", "sigma_b"},
    "fm-vfl": {"d", "frac_bits", "mpc", "mpc_impl", "mpc_s", "phases_bytes", "phases_s"},
    "fm-central": {"d"},
    "dpsgd-c": set(),
    "opacus-dpsgd": set(),
    # ceiling: public noise and the label holder's own class shares; FCM and the rescale factor
    # are computed from received gradients / DP-released statistics
    "afe-vfl": {
        "accuracy_ceiling", "fcm_kept_fraction", "head_s", "rescale_factor", "sigma", "variant",
    },
    "ldp-vfl": {"auprc", "sigma"},
    "pbm-vfl": {
        "auprc", "bits_per_value", "pbm_party_ms_median", "secagg_dropouts", "secagg_server_ms",
    },
    # the server's loss is computed from the noisy embeddings it received and its own labels
    "vafl-dp": {
        "client_grad", "clip", "clip_range", "curve", "curve_note", "downlink_bits",
        "entropy_coding", "final_train_loss", "replies", "rounds", "schedule", "server", "sigma",
        "staleness", "step_ms", "stochastic_rounding", "topk", "uplink_bits", "uplink_delta_bits",
    },
    # the label holder's own skeleton (it chose every split) and the run's public settings
    "secureboost-dp": {
        "bins", "ceiling", "colsample", "depth", "lam", "leaks", "local_trees", "lr",
        "min_child_weight", "nodes", "paillier_bits", "splits_by_party", "subsample", "trees",
    },
}  # fmt: skip
# the release-once schedule's accuracy ceiling: computed at the label holder from its own test
# labels' class shares and the public noise (mu, or the label release's epsilon)
for _m in ("afe-vfl", "ldp-vfl", "pbm-vfl", "vafl-dp"):
    EXTRA[_m] |= {"accuracy_ceiling", "ceiling_mu", "ceiling_epsilon"}
SMALL = {
    "hdp-vfl": {"epochs": 2},
    "fm-vfl": {"parties": 3},
    "fm-central": {"parties": 1},
    "dpsgd-c": {"parties": 1, "epochs": 1},
    "afe-vfl": {"epochs": 1},
    "ldp-vfl": {"epochs": 1},
    "pbm-vfl": {"epochs": 1, "n": 120, "embedding_dim": 2, "batch_size": 128, "b": 8},
    "vafl-dp": {"epochs": 1},
    "opacus-dpsgd": {"parties": 1, "epochs": 1, "n": 150, "delta": 1e-5},
    "secureboost-dp": {"trees": 2, "depth": 2, "paillier_bits": 256},
}
LABEL_SPLIT = ("afe-vfl", "ldp-vfl", "pbm-vfl", "vafl-dp")  # data parties get exact gradients
DATA_DERIVED = ("min/max", "mean", "vocabular", "range")


@pytest.fixture(autouse=True)
def _forget_registered_datasets():
    """Datasets a test registers (csv, arrays) leave the catalogue with it."""
    before = set(_REGISTRIES.get("dataset", {}))
    yield
    for name in set(_REGISTRIES.get("dataset", {})) - before:
        del _REGISTRIES["dataset"][name]


def _run(method: str, **kw) -> dict:
    params = {"method": method, "dataset": "breast", "parties": 2, "epsilon": 4.0, "seed": 0}
    return run_experiment(build_spec({**params, **SMALL[method], **kw}))


@pytest.mark.parametrize("method", sorted(SMALL))
def test_dp_record_holds_only_what_its_writer_may_see(method):
    rec = _run(method)
    assert set(rec) <= TOP, set(rec) - TOP
    assert rec["model_fingerprint"] == {} and "withheld" in rec["fingerprint_withheld"]
    assert set(rec["stats"]) <= STATS, set(rec["stats"]) - STATS
    # the label holder's rows count, or a printed unit holds the label (release-once's sample)
    p = rec["privacy"]
    if method in ("hdp-vfl", "fm-vfl", "fm-central", "dpsgd-c", "opacus-dpsgd") or (
        "sample" in p["by_unit"]
    ):
        assert not set(UNRELEASED_STATS) & set(rec["stats"])
        assert not any(w.startswith(UNRELEASED_WARNINGS) for w in rec["stats"].get("warnings", []))
    # issue 42 item 4: the coalitions the ε holds against, the source of the public bounds
    assert p["coalitions"] and "569 rows" in p["public_bounds"]
    if method == "pbm-vfl":  # the coalition it does not cover, and that coalition's ε
        assert "Not the server with another data party" in p["coalitions"]
        (eps_coalition,) = p["coalition_epsilon"].values()
        assert eps_coalition > p["epsilon"]
    # no statistic of the label holder's exact rows under privacy (hdp-vfl's final refit)
    assert "final_fit" not in p.get("stream", {}) and "threshold" not in p.get("stream", {})
    assert set(rec["extra"]) <= EXTRA[method], set(rec["extra"]) - EXTRA[method]
    assert not set(UNRELEASED_EXTRA) & set(rec["extra"])
    assert rec["noise_generator"] == "aes-ctr-csprng" and rec["noise_seeded"] is False
    assert p["epsilon"] is not None and p["epsilon"] <= 4.0 * (1 + 1e-9)
    # at default settings nothing computed from the private columns is declared public
    for line in p["outside_guarantee"]:
        assert not any(w in line for w in DATA_DERIVED), line
    if method in LABEL_SPLIT and p.get("release_schedule", "split") == "split":
        # split learning: the label is not protected, so no unit that includes it
        assert "sample" not in (p.get("by_unit") or {}) and p["unit"] == "party-row"
        assert LABEL_EXPOSURE in p["outside_guarantee"]
    elif method in LABEL_SPLIT:  # release-once: the labels are released under label_epsilon
        assert p["label_epsilon"] is not None


def test_every_dp_method_is_run_at_defaults():
    """Issue 30 acceptance: the check above covers every registered method that takes an ε."""
    dp = {n for n, m in _REGISTRIES["method"].items() if m.requires_epsilon or m.accepts_epsilon}
    assert dp <= set(SMALL), dp - set(SMALL)


def test_vafl_dp_labels_are_released_once_by_default_and_exposed_only_under_split():
    """vafl-dp's server's labels: at default (release-once) the clients get them once through
    randomized response under label_epsilon; --release-schedule split sends them exact, and the
    record says so; docs/threat-model.md says both and how a user closes the exposure."""
    default = _run("vafl-dp")["privacy"]
    assert LABEL_EXPOSURE not in default["outside_guarantee"]
    assert default["label_epsilon"] is not None
    split = _run("vafl-dp", release_schedule="split")["privacy"]
    assert LABEL_EXPOSURE in split["outside_guarantee"] and "sample" not in split["by_unit"]
    doc = (ROOT / "docs" / "threat-model.md").read_text(encoding="utf-8")
    section = doc.split("## vafl-dp", 1)[1].split("\n## ", 1)[0]
    assert "label_epsilon" in section and "--release-schedule split" in section


def test_hdp_vfl_deconvolved_threshold_stays_out_of_the_record():
    """Issue 42 item 2: the deconvolved threshold is computed from the label holder's exact
    derivatives; the record names it withheld instead of printing it."""
    p = _run("hdp-vfl", threshold="deconvolved")["privacy"]
    assert "threshold" not in p["stream"] and "final_fit" not in p["stream"]
    assert any(w.startswith("stream.threshold") for w in p["withheld"]), p.get("withheld")


def test_release_once_head_warning_text_is_the_one_withheld():
    """The head's fallback warning (a choice made on exact training labels) starts with the
    prefix the disclosure rules withhold, so a reworded warning cannot slip into a record."""
    src = (ROOT / "securevfl" / "training" / "release_once.py").read_text(encoding="utf-8")
    assert f'"{UNRELEASED_WARNINGS[0]}' in src


def test_vafl_dp_curve_voids_epsilon():
    rec = _run("vafl-dp", curve_points=2, release_schedule="split")
    assert rec["privacy"]["epsilon"] is None
    assert any("curve" in s for s in rec["privacy"]["outside_guarantee"])


def test_seed_does_not_seed_the_noise_and_the_reproduction_mode_prints_no_epsilon():
    spec = {"method": "hdp-vfl", "dataset": "diabetes", "parties": 2, "epsilon": 4.0}
    spec.update(seed=0, epochs=2)
    a, b = (run_experiment(build_spec(spec)) for _ in range(2))
    assert a["metrics"] != b["metrics"]  # same seed, fresh CSPRNG noise
    assert a["privacy"]["epsilon"] is not None and a["config"]["seed"] == 0
    spec["reproducible_noise"] = True
    c, d = (run_experiment(build_spec(spec)) for _ in range(2))
    assert c["metrics"] == d["metrics"] and c["model_fingerprint"] == d["model_fingerprint"]
    assert c["model_fingerprint"] and c["noise_seeded"] is True
    assert c["privacy"]["epsilon"] is None and c["privacy"]["guarantee"] == "not a guarantee"
    assert all(v["epsilon"] is None for v in c["privacy"]["per_party"].values())
    assert c["privacy"]["outside_guarantee"][0] == NOT_A_GUARANTEE
    with pytest.raises(ConfigError, match="reproducible_noise needs --seed"):
        run_experiment(build_spec({**spec, "seed": None}))


def test_cli_acceptance_reproduction_mode():
    cmd = [sys.executable, "-m", "bench.cli", "run", "hdp-vfl", "--dataset", "breast"]
    cmd += ["--parties", "2", "--epsilon", "4", "--seed", "0", "--epochs", "2"]
    out = subprocess.run(
        [*cmd, "--reproducible-noise"], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout
    assert "privacy: no ε (not a guarantee" in out and "ε=" not in out


# --------------------------------------------------------------------------- preprocessing


def _neighbours(X: np.ndarray, i: int) -> np.ndarray:
    Y = X.copy()
    Y[i] = X[i] * 50.0 + 1e4  # far outside every column's range
    return Y


def test_replacing_one_row_moves_no_other_rows_scaled_features():
    from sklearn.datasets import load_breast_cancer

    raw = load_breast_cancer().data
    names = [f"c{j}" for j in range(raw.shape[1])]

    def scaled(X, public):
        specs = [
            NumericColumn(n, X[:, j], domain=domains.BREAST[j] if public else None, clip=public)
            for j, n in enumerate(names)
        ]
        return encode_columns(specs)[0]

    i = 7
    keep = np.arange(len(raw)) != i
    a, b = scaled(raw, True), scaled(_neighbours(raw, i), True)
    assert np.array_equal(a[keep], b[keep])  # public domains: row-wise
    assert np.abs(b).max() <= 1.0
    # the old min/max scaling moved every other row (what the test guards against)
    old_a, old_b = scaled(raw, False), scaled(_neighbours(raw, i), False)
    assert np.abs(old_a[keep] - old_b[keep]).max() > 0.1


def test_csv_bounds_make_scaling_row_wise_and_are_required_for_every_column(tmp_path):
    rng = np.random.default_rng(0)
    blocks = [rng.normal(size=(40, 2)), rng.normal(size=(40, 3))]
    y = (blocks[0][:, 0] > 0).astype(int)
    names = [["a", "b"], ["c", "d", "e"]]
    bounds = dict.fromkeys(["a", "b", "c", "d", "e"], (-3.0, 3.0))
    register_party_arrays("t-bounds", blocks, y, task="binary", names=names, bounds=bounds)
    from securevfl.data import load_dataset

    X0 = load_dataset("t-bounds").X
    other = [blocks[0].copy(), blocks[1]]
    other[0][5] = 1e6
    register_party_arrays("t-bounds", other, y, task="binary", names=names, bounds=bounds)
    X1 = load_dataset("t-bounds").X
    keep = np.arange(40) != 5
    assert np.array_equal(X0[keep], X1[keep]) and load_dataset("t-bounds").fitted == ()
    register_party_arrays("t-bounds", blocks, y, task="binary")
    assert "no --bounds" in load_dataset("t-bounds").fitted[0]
    with pytest.raises(ConfigError, match="missing"):
        register_party_arrays("t-bounds", blocks, y, task="binary", names=names, bounds={})
    f = tmp_path / "b.csv"
    f.write_text("column,lo,hi\na,-1,1\nb,2,1\n")
    with pytest.raises(ConfigError, match="line 3 must have finite lo <= hi"):
        read_bounds(f)
    f.write_text("column,lo,hi\na,-1,1\n")
    assert read_bounds(f) == {"a": (-1.0, 1.0)}


def test_csv_bounds_are_public_or_released_never_a_hole(tmp_path):
    """Issue 42 item 5: without --bounds a run with an ε releases its ranges under the budget
    (tests/test_dp_bounds.py checks the release); --bounds spends nothing."""
    rng = np.random.default_rng(1)
    n = 60
    x0, x1 = rng.normal(size=(n, 2)), rng.normal(size=(n, 2))
    y = (x0[:, 0] + x1[:, 0] > 0).astype(int)
    p0, p1 = tmp_path / "p0.csv", tmp_path / "p1.csv"
    np.savetxt(p0, np.column_stack([x0, y]), delimiter=",", header="u,v,label", comments="")
    np.savetxt(p1, x1, delimiter=",", header="w,z", comments="")
    base = {"method": "hdp-vfl", "dataset": f"csv:{p0},{p1}", "parties": 2, "epsilon": 4.0}
    base.update(seed=0, epochs=1, center=False)
    rec = run_experiment(build_spec(base))
    assert not any("no --bounds" in s for s in rec["privacy"]["outside_guarantee"])
    assert rec["privacy"]["public_bounds"].startswith("released under the budget")
    assert rec["privacy"]["bounds"]["parties"] == [0, 1]
    bf = tmp_path / "bounds.csv"
    bf.write_text("column,lo,hi\n" + "".join(f"{c},-4,4\n" for c in "uvwz"))
    rec = run_experiment(build_spec({**base, "bounds": str(bf)}))
    assert not any("no --bounds" in s for s in rec["privacy"]["outside_guarantee"])
    assert rec["privacy"]["public_bounds"] == f"declared by the user in --bounds {bf}"
    assert "bounds" not in rec["privacy"]  # public bounds: no release, nothing composed


def test_catalogue_declares_every_column_and_vocabulary():
    from securevfl.data import load_dataset

    for name in ("adult", "breast", "cps1988", "diabetes", "digits", "phishing"):
        assert load_dataset(name, n=200).fitted == (), name
    assert load_dataset("adult", n=200, encoding="compact").fitted == ()
    assert "target" in load_dataset("synthetic-linear", n=50).fitted[0]  # listed, not hidden
    assert set(domains.ADULT_VOCAB["sex"]) == {"Female", "Male"}
    with pytest.raises(Exception, match="must be one of"):  # an unknown category is refused
        encode_columns([CategoricalColumn("sex", np.array(["X"]), domains.ADULT_VOCAB["sex"])])


def test_centring_means_come_from_training_rows_and_are_laplace_released():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(500, 4))
    b = laplace_scale(n=500, d=4, epsilon=0.5)
    assert b == pytest.approx(2 * 4 / (500 * 0.5))
    draws = np.array(
        [released_means(X, epsilon=0.5, rng=np.random.default_rng(s)) for s in range(2000)]
    )
    # the noise is Laplace(b): std b·√2 around the exact mean
    np.testing.assert_allclose(draws.std(axis=0), b * math.sqrt(2), rtol=0.1)
    np.testing.assert_allclose(draws.mean(axis=0), X.mean(axis=0), atol=4 * b / math.sqrt(2000))


def test_centring_composition_against_an_independent_laplace_epsilon():
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    eps, n, d = 4.0, 455, 15
    eps_c = CENTRE_SHARE * eps
    b = laplace_scale(n=n, d=d, epsilon=eps_c)
    acc = pld_privacy_accountant.PLDAccountant()
    acc.compose(dp_event.LaplaceDpEvent(noise_multiplier=b / (2 * d / n)))
    assert acc.get_epsilon(1e-12) == pytest.approx(eps_c, rel=1e-3)
    report = {
        "epsilon": 3.6,
        "unit": "party-row",
        "per_party": {"0": {"epsilon": 3.6}},
        "by_unit": {"party-row": 3.6, "sample": 5.0},
    }
    out = compose_into(report, epsilon=eps, unit="party-row", parties=2)
    assert out["epsilon"] == pytest.approx(4.0) and out["per_party"]["0"]["epsilon"] == 4.0
    assert out["by_unit"]["sample"] == pytest.approx(5.0 + 2 * eps_c)
    # a sample-unit method: each of the K parties releases at ε_c / K, the share in all
    sample = {"epsilon": 3.6, "unit": "sample", "by_unit": {"party-row": 2.0, "sample": 3.6}}
    out = compose_into(sample, epsilon=eps, unit="sample", parties=4)
    assert out["epsilon"] == pytest.approx(4.0) and out["centring"]["epsilon_per_party"] == 0.1
    assert out["by_unit"]["party-row"] == pytest.approx(2.1)


def test_spec_field_defaults():
    s = RunSpec(method="hdp-vfl")
    assert s.reproducible_noise is False and s.bounds is None
