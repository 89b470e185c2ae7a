"""secureboost / secureboost-dp: packing, the encrypted protocol against the plain arithmetic,
accuracy against scikit-learn's boosted trees, the DP ε against the analytic Gaussian, save and
predict across processes. Small data (breast), 2-3 trees of depth 2, 256-bit keys: seconds."""

from __future__ import annotations

import csv
import json
import math

import gmpy2
import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

import securevfl
from bench.cli import main
from protocols import paillier_he as ph
from protocols import paillier_pack as pk
from securevfl.run_options import build_spec

FAST = {"trees": 3, "depth": 2, "paillier_bits": 256}


def _run(method="secureboost", save=None, **kw) -> dict:
    given = {"method": method, "dataset": "breast", "seed": 3, **FAST, **kw}
    return securevfl.run_experiment(build_spec(given), save=save)


def test_packed_signed_sums_survive_encryption():
    pub, priv = ph.generate_keypair(512)
    n, n2 = int(pub.n), gmpy2.mpz(pub.nsquare)
    rows = [(-5, 7), (3, 0), (-(2**40), 2**41)]
    cts = [ph.raw_encrypt(pub, pk.pack(r, 64, n)) for r in rows]
    total = cts[0] * cts[1] % n2 * cts[2] % n2
    assert pk.unpack(priv.raw_decrypt(int(total)), 2, 64, n) == [-(2**40) - 2, 2**41 + 7]
    # Horner packing: entry j lands in slots 2j, 2j+1; a negative top slot reads back
    packed = pk.pack_ciphertexts(cts, 128, n2)
    assert pk.capacity(512, 128) == 3
    got = pk.unpack(priv.raw_decrypt(int(packed)), 6, 64, n)
    assert got == [-5, 7, 3, 0, -(2**40), 2**41]
    with pytest.raises(ph.PaillierParameterError, match="magnitude"):
        pk.pack([2**63], 64, n)


def test_encrypted_trees_equal_the_same_trees_at_any_key_size():
    """Exact integer arithmetic: the key size changes nothing but the cost, so two keys give
    bit-identical models (and the figures measured with a small key hold for 2048 bits)."""
    a = _run(paillier_bits=256)
    b = _run(paillier_bits=512, paillier_randomness="full")
    assert a["model_fingerprint"] == b["model_fingerprint"]
    assert a["metrics"] == b["metrics"]
    assert a["extra"]["splits_by_party"]["1"] > 0  # the partner's columns were used


def test_accuracy_near_pooled_boosted_trees_and_above_the_label_holder_alone():
    from sklearn.ensemble import HistGradientBoostingClassifier

    from securevfl.data import load_dataset, split_in_place
    from securevfl.run.steps import party_blocks

    rec = _run(trees=3, depth=2, seed=0)
    spec = build_spec({"method": "secureboost", "dataset": "breast", "seed": 0})
    ds = load_dataset("breast", seed=0)
    blocks = party_blocks(ds.groups, spec, 0)
    tr, te = split_in_place(ds, seed=0)
    acc = {}
    for name, cols in (("pooled", np.concatenate([blocks[0], blocks[1]])), ("own", blocks[0])):
        ref = HistGradientBoostingClassifier(
            max_depth=2,
            max_iter=3,
            learning_rate=0.3,
            l2_regularization=1.0,
            max_bins=32,
            min_samples_leaf=1,
            max_leaf_nodes=None,
            early_stopping=False,
        ).fit(tr.X[:, cols], tr.y)
        acc[name] = float(np.mean(ref.predict(te.X[:, cols]) == te.y))
    ours = rec["metrics"]["accuracy"]
    assert ours >= acc["pooled"] - 0.03, (ours, acc)
    assert ours > acc["own"], (ours, acc)


def _analytic_gaussian_epsilon(mu: float, delta: float) -> float:
    """ε of a μ-GDP mechanism at δ (Dong, Roth and Su 2019, Cor. 2.13), solved by brentq."""

    def gap(eps: float) -> float:
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2) - delta

    return brentq(gap, 1e-9, 500.0)


def test_dp_epsilon_matches_the_composed_gaussian_and_names_its_limits():
    rec = _run("secureboost-dp", epsilon=4.0, delta=1e-5, seed=0)
    p = rec["privacy"]
    assert p["unit"] == "party-row" and p["epsilon"] <= 4.0 + 1e-9
    sigma = p["sigma"]
    releases = p["releases_per_partner"]
    cols = p["columns_per_release"]["1"]
    assert releases == FAST["trees"] * FAST["depth"]
    # R Gaussian releases of noise multiplier sigma / (2 sqrt(cols)) compose to sqrt(R)/z-GDP
    mu = math.sqrt(releases) * 2 * math.sqrt(cols) / sigma
    assert p["epsilon"] == pytest.approx(_analytic_gaussian_epsilon(mu, 1e-5), rel=0.02)
    assert any("partition" in line for line in p["outside_guarantee"])
    assert rec["family"] == "dp"


def test_dp_noise_reaches_the_opened_sums():
    """The same seeded run with and without noise: splits move at a small ε."""
    plain = _run(seed=0)
    noisy = _run("secureboost-dp", epsilon=0.5, delta=1e-5, seed=0, reproducible_noise=True)
    assert plain["model_fingerprint"] != noisy["model_fingerprint"]


def test_local_trees_ask_the_partner_nothing():
    rec = _run(local_trees=3)
    assert rec["extra"]["splits_by_party"]["1"] == 0
    with pytest.raises(securevfl.errors.ConfigError, match="partner trees"):
        _run("secureboost-dp", epsilon=1.0, local_trees=3)


def _new_rows(tmp_path, model, n=40):
    from securevfl.data import load_dataset

    ds = load_dataset("breast", seed=0)
    rng, paths = np.random.default_rng(5), []
    for k in range(model.data_parties):
        cols = model.columns(k)
        p = tmp_path / f"new{k}.csv"
        with p.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["ID", *cols["names"]])
            for i in rng.permutation(n):
                w.writerow([f"r{i}", *[repr(float(v)) for v in ds.X[i, cols["indices"]]]])
        paths.append(p)
    return paths


def test_saved_model_rescores_its_test_split_and_keeps_thresholds_with_owners(tmp_path):
    out = tmp_path / "m"
    rec = _run(save=str(out))
    model = securevfl.load_model(out)
    scores, y = model.predict_test_split()
    assert np.mean((scores >= 0.5) == (y == 1)) == pytest.approx(rec["metrics"]["accuracy"])
    names0 = sorted(p.name for p in (out / "party_0").iterdir())
    names1 = sorted(p.name for p in (out / "party_1").iterdir())
    assert "tree_owner.npy" in names0 and not any(n.startswith("tree_") for n in names1)
    card = json.loads((out / "party_1" / "card.json").read_text())
    assert card["kind"] == "trees" and card["meta"]["secret_files"] == []


@pytest.mark.networked
def test_predict_new_rows_over_two_processes_equals_in_process(tmp_path, capsys):
    out = tmp_path / "m"
    _run(save=str(out))
    model = securevfl.load_model(out)
    new = _new_rows(tmp_path, model)
    args = ["predict", "--model", str(out), "--dataset", "csv:" + ",".join(map(str, new))]
    args += ["--id-column", "ID", "--out", str(tmp_path / "s.csv"), "--json", "--processes"]
    assert main(args) == 0, capsys.readouterr().err
    rec = json.loads(capsys.readouterr().out)
    local = model.predict_csv(new, "ID")
    with (tmp_path / "s.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert rec["runtime"] == "processes" and len(rows) == len(local.ids) == 40
    assert [r["id"] for r in rows] == local.ids
    assert np.array_equal([float(r["score"]) for r in rows], local.scores)
    assert rec["sent_per_row"]["1"] > 0  # the partner answered for its nodes


@pytest.mark.networked
def test_training_over_processes_gives_the_in_process_model(capsys):
    argv = ["run", "secureboost", "--dataset", "breast", "--seed", "3", "--json"]
    argv += ["--trees", "2", "--depth", "2", "--paillier-bits", "256"]
    assert main(argv) == 0
    a = json.loads(capsys.readouterr().out)
    assert main([*argv, "--processes"]) == 0, capsys.readouterr().err
    b = json.loads(capsys.readouterr().out)
    assert a["model_fingerprint"] == b["model_fingerprint"] and a["metrics"] == b["metrics"]


def test_demo_shows_one_split_and_what_each_party_sees(capsys):
    from bench.demos import secureboost as demo

    assert demo.main(["--rows", "8", "--bins", "4", "--bits", "256"]) == 0
    out = capsys.readouterr().out
    assert "ciphertexts only" in out and "decrypts per-bin sums" in out
    assert "left rows" in out and "lookup table" in out


def test_report_section_tabulates_secureboost_runs(tmp_path):
    from bench.reports import secureboost as section

    rec = _run()
    text = section.render([rec], tmp_path)
    assert "| breast | secureboost (3 trees, depth 2, 32 bins) | 1 |" in text
    assert section.render([], tmp_path).endswith("No secureboost records.\n")


def test_noisy_gains_are_debiased_by_the_noise_variance():
    from securevfl.models.boosted_trees import split_gains

    hg, hh = np.array([[1.0, -1.0, 0.5]]), np.array([[2.0, 2.0, 2.0]])
    plain = split_gains(0.5, 6.0, hg, hh, 1.0, 0.0)
    noisy = split_gains(0.5, 6.0, hg, hh, 1.0, 0.0, g_noise_var=0.1)
    # bins <= 0: one bin's noise on each side; bins <= 1: two bins'
    want = plain - 0.5 * 0.1 * np.array([1, 2]) * (1 / (2 + 1) + 1 / (4 + 1))
    want[0, 1] = plain[0, 1] - 0.5 * 0.2 * (1 / (4 + 1) + 1 / (2 + 1))
    assert np.allclose(noisy, want)


def _noise_split_case(partner_signal: float):
    """One root node of 2,000 rows: the label holder's one column moves with the label; the
    partner's 40 columns are pure noise (``partner_signal`` 0) or the first moves with the
    label; the partner's bin sums carry the DP noise (sd 10 on g, 2.5 on h per bin)."""
    from securevfl.methods import secureboost_protocol as sp

    rng, n, nb = np.random.default_rng(0), 2000, 32
    y = rng.integers(0, 2, n)
    g, h = 0.5 - y, np.full(n, 0.25)

    def binned(shift, F):
        x = rng.normal(size=(n, F)) + shift[:, None]
        return np.clip(np.floor((x + 4) / 8 * nb), 0, nb - 1).astype(np.int32)

    node_of, sign = np.zeros(n, dtype=np.int64), 2.0 * y - 1
    node = sp.Node(0, np.arange(n), float(g.sum()), float(h.sum()))
    own = sp.own_sums(binned(0.6 * sign, 1), g, h, node_of, 1, nb)
    x = binned(np.zeros(n), 40)
    x[:, 0] = binned(partner_signal * sign, 1)[:, 0]
    sd = (10.0, 2.5)
    part = sp.own_sums(x, g, h, node_of, 1, nb)
    part += np.stack([rng.normal(0, s, part[0].shape) for s in sd])
    return node, own, part, sd


def test_noisy_splits_go_to_the_label_holder_when_the_partners_columns_are_noise():
    """secureboost-dp's split rule: the largest of 40 x 31 noisy gains beats the label holder's
    real split under the debiased gain alone (the old rule); the least gain consistent with the
    noise does not. A partner column with a real signal still wins."""
    from securevfl.methods import secureboost_protocol as sp
    from securevfl.models.boosted_trees import split_gains

    node, own, part, sd = _noise_split_case(0.0)
    exact = split_gains(node.G, node.H, own[0, 0], own[1, 0], 1.0, 1.0).max()
    debiased = split_gains(node.G, node.H, part[0, 0], part[1, 0], 1.0, 1.0, sd[0] ** 2)
    assert debiased.max() > exact > 0  # the old rule would split on noise
    (where,) = sp.choose_splits([node], {0: own, 1: part}, 1.0, 1.0, {1: sd})
    assert where is not None and where[0] == 0
    node, own, part, sd = _noise_split_case(2.0)
    (where,) = sp.choose_splits([node], {0: own, 1: part}, 1.0, 1.0, {1: sd})
    assert where is not None and where[:2] == (1, 0)


def test_noisy_gain_floor_is_the_least_gain_in_the_noise_box():
    """The coordinate descent reaches the box minimum: no point of a fine grid over the box
    (|e| <= z sqrt(b+1) sd_g, |u| <= z sqrt(b+1) sd_h) has a smaller gain."""
    from securevfl.models.boosted_trees import noisy_gain_floor

    rng, G, H, lam, sd, z = np.random.default_rng(1), 3.0, 40.0, 1.0, (2.0, 0.5), 2.0
    hg, hh = rng.normal(0, 5, (1, 4)), rng.uniform(5, 12, (1, 4))
    floor = noisy_gain_floor(G, H, hg, hh, lam, 0.5, sd, z)[0]
    for b, (GL, HL) in enumerate(zip(np.cumsum(hg)[:-1], np.cumsum(hh)[:-1], strict=True)):
        w = z * math.sqrt(b + 1)
        gl, hl = np.meshgrid(
            *(np.linspace(c - w * s, c + w * s, 401) for c, s in zip((GL, HL), sd, strict=True))
        )
        gain = 0.5 * (gl**2 / (hl + lam) + (G - gl) ** 2 / (H - hl + lam) - G**2 / (H + lam))
        tol = 1e-6 * (1 + abs(gain.min()))  # the grid's resolution
        assert gain.min() - tol <= floor[b] <= gain.min() + tol
        assert floor[b] < gain[200, 200]  # below the gain at the noisy sums themselves


def test_regression_beats_the_label_holder_alone():
    rec = _run(dataset="diabetes", trees=5, seed=0)
    alone = securevfl.run_experiment(
        build_spec({"method": "local", "dataset": "diabetes", "seed": 0})
    )
    assert rec["metrics"]["mse"] < alone["metrics"]["mse"]


def test_a_lookup_table_that_points_outside_the_partys_columns_is_refused(tmp_path, capsys):
    import hashlib

    out = tmp_path / "m"
    _run(save=str(out))
    d = out / "party_1"
    cols = np.load(d / "lookup_column.npy")
    np.save(d / "lookup_column.npy", cols + 1000, allow_pickle=False)
    card = json.loads((d / "card.json").read_text())
    card["files"]["lookup_column.npy"] = hashlib.sha256(
        (d / "lookup_column.npy").read_bytes()
    ).hexdigest()
    (d / "card.json").write_text(json.dumps(card))
    assert main(["predict", "--model", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lookup_column" in err[0], err


def test_a_node_without_hessian_mass_has_no_split_at_lambda_zero():
    """secureboost-dp's noisy sums can leave H + λ = 0 at λ = 0: every gain is -inf, no error."""
    from securevfl.models.boosted_trees import noisy_gain_floor, split_gains

    hist = np.zeros((2, 4))
    gains = split_gains(0.5, 0.0, hist, hist, lam=0.0, min_child=0.0)
    assert gains.shape == (2, 3) and np.all(np.isneginf(gains))
    floors = noisy_gain_floor(0.5, 0.0, hist, hist, 0.0, 0.0, (1.0, 0.25), z=3.0)
    assert floors.shape == (2, 3) and np.all(np.isneginf(floors))
