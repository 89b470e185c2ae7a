"""Saved models (--save), reloading and predicting: same classes as at training's end, new rows
from per-party CSVs aligned by PSI, and the refusals (altered file, schema, wrong party)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import securevfl
from bench.cli import main
from protocols.compress import decode
from securevfl.data import load_dataset
from securevfl.model.evaluation import metrics_for
from securevfl.model.files import classes_digest
from securevfl.run_options import build_spec

EXPORTABLE = [
    {"method": "vfl"},
    {"method": "vfl", "model": "mlp", "epochs": 2},
    {"method": "hdp-vfl", "epsilon": 1.0},
    {"method": "local"},
    {"method": "local", "model": "mlp", "epochs": 2},
    {"method": "centralized"},
    {"method": "centralized", "model": "mlp", "epochs": 2},
    {"method": "fm-vfl", "epsilon": 1.0},
    {"method": "fm-central", "epsilon": 1.0},
    {"method": "dpsgd-c", "epsilon": 1.0},
    {"method": "opacus-dpsgd", "epsilon": 1.0, "delta": 1e-5},
    {"method": "opacus-dpsgd", "epsilon": 1.0, "delta": 1e-5, "model": "mlp", "epochs": 1},
    {"method": "npq", "model": "mlp", "epochs": 1},
    # the cascade trainer: the client's message compressed as its uplink was (8 bits here)
    {"method": "vafl", "model": "mlp", "epochs": 1},
    {"method": "compressed-vfl", "model": "mlp", "epochs": 1},
    {"method": "zoo-vfl", "model": "mlp", "epochs": 1},
    {"method": "czofo-vfl", "model": "mlp", "epochs": 1, "q": 2},
    # CKKS training; its test rows are scored from the parties' plain weights
    {"method": "he-vfl", "epochs": 3},
    # the CNN bottom (digits: 8x8 images), on the split-NN trainer and on the cascade trainer
    {"method": "vfl", "model": "cnn", "dataset": "digits", "epochs": 1},
    {"method": "vafl", "model": "cnn", "dataset": "digits", "epochs": 1},
    # boosted trees: the skeleton at the label holder, each party's lookup table
    {"method": "secureboost", "trees": 2, "depth": 2, "paillier_bits": 256},
    {"method": "secureboost-dp", "trees": 2, "paillier_bits": 256, "epsilon": 4.0},
]


@pytest.fixture(autouse=True)
def _all_methods():
    import baselines
    from securevfl.methods import load_all

    load_all()
    baselines.load_all()


def _train(tmp_path: Path, **kw) -> tuple[dict, Path]:
    out = tmp_path / "model"
    spec = build_spec({"dataset": "breast", "seed": 3, **kw})
    return securevfl.run_experiment(spec, save=str(out)), out


@pytest.mark.parametrize("args", EXPORTABLE, ids=lambda a: "-".join(map(str, a.values())))
def test_reloaded_model_predicts_the_classes_of_training(tmp_path, args):
    record, out = _train(tmp_path, **args)
    model = securevfl.load_model(out)
    scores, y = model.predict_test_split()
    card = model.card
    assert classes_digest(model.task, scores) == card["test_classes_sha256"]
    assert metrics_for(model.task, y, scores) == pytest.approx(record["metrics"], abs=1e-12)
    # each party wrote only its own part
    parts = sorted(p.name for p in out.iterdir())
    federated = record["capabilities"]["data"] == "federated"
    holders = sorted({*card["scoring_parties"], card["label_party"]})
    expect = [f"party_{k}" for k in holders] if federated else ["party_0"]
    assert parts == expect


def test_trainer_models_score_bit_identically(tmp_path):
    """The GLM and split-NN trainers are deterministic at inference: the same scores, bit for
    bit (checked against the in-memory model's own scoring, which training reported)."""
    for kw in ({"method": "vfl"}, {"method": "vfl", "model": "mlp", "epochs": 1}):
        spec = build_spec({"dataset": "breast", "seed": 5, **kw})
        from securevfl.context import RunContext
        from securevfl.experiment import build_views, validate_spec
        from securevfl.registry import create
        from securevfl.runtime import InProcessRuntime

        method = validate_spec(spec)
        rt = InProcessRuntime(2)
        facts: dict = {}  # what the run records for a saved model (centring, names)
        info, views, pooled = build_views(spec, method, [0, 1], facts)
        fit = create("method", spec.method).fit(
            RunContext(rt=rt, spec=spec, info=info, views=views, shared_seed=5)
        )
        out = tmp_path / kw.get("model", "glm")
        from securevfl.model.files import save_parts

        save_parts(out, spec, method, info, views, fit, facts, shared_seed=5)
        scores, _ = securevfl.load_model(out).predict_test_split()
        assert np.array_equal(scores, fit.test_scores)


def _gaussian_epsilon(sigma: float, sens: float, delta: float) -> float:
    """Independent: the exact (ε, δ) curve of one Gaussian release (Balle & Wang 2018,
    Thm 8), δ(ε) = Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ), solved for ε."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    a = sens / (2 * sigma)

    def gap(e: float) -> float:
        b = e * sigma / sens
        return norm.cdf(a - b) - np.exp(e) * norm.cdf(-a - b) - delta

    return brentq(gap, 0.0, 200.0)


def _hockey(lp: np.ndarray, lq: np.ndarray, P: int):
    """δ(ε) = Σ max(0, p − e^ε q) of the P-fold product of the pair (p, q) (P <= 2), written
    out: δ_2(ε) = Σ_i p_i δ_1(ε − L_i) with L_i = log p_i/q_i, δ_1 from sorted losses."""
    with np.errstate(divide="ignore", invalid="ignore"):
        L = np.where(lp == -np.inf, -np.inf, lp - lq)
    order = np.argsort(-L)
    Ls, ps, qs = L[order], np.exp(lp[order]), np.exp(lq[order])
    cum_p, cum_q = np.concatenate([[0], np.cumsum(ps)]), np.concatenate([[0], np.cumsum(qs)])

    def one(e: np.ndarray) -> np.ndarray:
        n = np.searchsorted(-Ls, -e, side="left")  # the points with L > e
        return np.maximum(0.0, cum_p[n] - np.exp(e) * cum_q[n])

    if P == 1:
        return lambda e: float(one(np.array([e]))[0])
    assert P == 2
    keep = np.isfinite(L)  # p = 0 adds nothing; q = 0 (L = inf): p_i·p_j whole
    w = np.exp(lp)
    inf_mass = w[L == np.inf].sum()
    return lambda e: float(w[keep] @ one(e - L[keep]) + inf_mass)


def _pbm_epsilon(rel: dict, unit: str, delta: float) -> float:
    """Independent of the PLD accountant: the exact δ(ε) (hockey stick) of one scored row's
    release, P coordinates, solved for ε. Sample unit: the secure sum of M senders' b trials
    each at the extreme grid levels, so P coordinates are Binomial(P·b·M, p) at p_lo vs p_hi
    (the count is sufficient); party-row: the P-fold product of PBM's dominating pair."""
    from scipy.optimize import brentq
    from scipy.stats import binom

    from securevfl.privacy.pbm_accountant import dominating_pair

    b, M, P, beta = rel["b"], rel["n_parties"], rel["dim"], rel["beta"]
    if unit == "sample":
        top = int(beta * 4096)  # the sampler's grid: p = j / 2^12, |j - 2^11| <= floor(β 2^12)
        k = np.arange(P * b * M + 1)
        lo = binom.logpmf(k, P * b * M, (2048 - top) / 4096)
        up = binom.logpmf(k, P * b * M, (2048 + top) / 4096)
        curves = [_hockey(up, lo, 1), _hockey(lo, up, 1)]
    else:
        lo, up = (np.array(v) for v in dominating_pair("party-row", b, beta, M))
        curves = [_hockey(up, lo, P), _hockey(lo, up, P)]
    return brentq(lambda e: max(c(e) for c in curves) - delta, 0.0, 200.0)


NOISY = [
    # release-once (the default with --epsilon): the server's head on the released rows
    ("ldp-vfl", {"epsilon": 6.0}),
    # the split schedule, exact bottoms, private scoring: σ_test = σ of training
    (
        "ldp-vfl",
        {"epsilon": 6.0, "release_schedule": "split", "bottom": "exact", "eval": "private"},
    ),
    # PBM + secure aggregation at the test-row beta (release-once; b = 16 keeps it fast)
    ("pbm-vfl", {"epsilon": 6.0, "b": 16}),
    # the split schedule with private scoring, two coordinates per party: training's beta
    ("pbm-vfl", {"epsilon": 8.0, "release_schedule": "split", "b": 16, "embedding_dim": 2}),
    # afe-vfl: release-once (vanilla: clip + noise), as-trained rows clipped by the release
    ("afe-vfl", {"epsilon": 6.0}),
    ("afe-vfl", {"epsilon": 6.0, "release_shape": "as-trained"}),
    # the split schedule, variant full: each party's final DP rescaling factor, input scaling
    ("afe-vfl", {"epsilon": 6.0, "release_schedule": "split"}),
    # vafl-dp: release-once, and the cascade trainer's asynchronous rounds (σ of training)
    ("vafl-dp", {"epsilon": 6.0}),
    ("vafl-dp", {"epsilon": 6.0, "release_schedule": "split"}),
]
CLIPPED = NOISY[4:]  # afe-vfl's and vafl-dp's: a clip (and afe-vfl's rescaling) before noise


@pytest.mark.parametrize(
    "method,opts",
    NOISY,
    ids=[
        "ldp-release-once",
        "ldp-split-exact",
        "pbm-release-once",
        "pbm-split",
        "afe-release-once",
        "afe-as-trained",
        "afe-split-full",
        "vafl-dp-release-once",
        "vafl-dp-split",
    ],
)
def test_noisy_scoring_is_replayed_and_accounted_per_row(tmp_path, capsys, method, opts):
    """ldp-vfl, pbm-vfl, afe-vfl and vafl-dp save; predict releases every scored row through
    the same mechanism with fresh noise (pbm-vfl: PBM and a fresh secure aggregation, metered;
    afe-vfl and vafl-dp: the clip, afe-vfl's rescaling, then Gaussian noise) and records the ε of
    that one release per row (the accountant, checked against an independent computation and,
    where the record has it, the training test-row ε)."""
    pbm = method == "pbm-vfl"
    record, out = _train(tmp_path, method=method, model="mlp", epochs=1 if pbm else 2, **opts)
    model = securevfl.load_model(out)
    rel = model.card["meta"]["release"]
    if pbm:  # the test-row sampler the run scored with
        assert (
            rel["mechanism"] == "pbm-secagg" and rel["dim"] == model.card["spec"]["embedding_dim"]
        )
        test_sampler = record["privacy"].get("test_sampler") or record["privacy"]["sampler"]
        assert (rel["b"], rel["beta"]) == (test_sampler["b"], test_sampler["beta"])
    elif "sigma_test" in record["privacy"]:  # vafl-dp's split schedule: one σ, training's
        assert rel["sigma"] == pytest.approx(record["privacy"]["sigma_test"])
    ds = load_dataset("breast", seed=0)
    blocks = [ds.X[:, model.columns(k)["indices"]] for k in range(2)]
    pred = model.predict(blocks)
    priv = pred.record["privacy"]
    if pbm:
        for unit in ("party-row", "sample"):  # PLD is pessimistic: at or a little above
            want = _pbm_epsilon(rel, unit, rel["delta"])
            assert want - 1e-6 <= priv["by_unit"][unit] <= 1.001 * want, unit
        # the masked messages went over the runtime, a fresh key agreement before them
        phases = pred.record["comm"]["by_phase"]
        assert phases["setup"]["bytes"] > 0 and phases["predict"]["bytes"] > 0
        assert pred.record["sent_per_row"]["0"] > 0 and pred.record["sent_per_row"]["1"] > 0
    else:
        want = _gaussian_epsilon(rel["sigma"], rel["sensitivity"], rel["delta"])
        assert priv["scored_rows_epsilon"] == pytest.approx(want, rel=2e-3)
    if "test_row_epsilon" in record["privacy"]:  # release-once: a test row's one release
        assert priv["scored_rows_epsilon"] == pytest.approx(
            record["privacy"]["test_row_epsilon"], rel=1e-6
        )
    if pbm:  # the label holder's estimate around the sum of the senders' PBM means
        seeded = [securevfl.load_model(out, noise_seed=7) for _ in range(2)]
        embs, est, est2, rep = _pbm_estimates(model, blocks, seeded)
        assert not np.array_equal(est, est2)  # fresh noise
        assert np.array_equal(rep[0], rep[1])  # the reproduction mode: the same draws twice
        # Algorithm 1 written out: p_k = 1/2 + trunc(x β 2^12) / 2^12; the estimate
        # C/(βb)(Σ q_k - bM/2) has mean C/β Σ (p_k - 1/2), variance (C/βb)^2 Σ b p_k (1 - p_k)
        b, beta, top = rel["b"], rel["beta"], int(rel["beta"] * 4096)
        ps = [0.5 + np.clip(np.trunc(e * beta * 4096), -top, top) / 4096 for e in embs]
        mean = sum(p - 0.5 for p in ps) / beta
        sd = np.sqrt(np.mean(sum(b * p * (1 - p) for p in ps))) / (beta * b)
        both = np.concatenate([est - mean, est2 - mean])
        assert np.std(both) == pytest.approx(sd, rel=0.12)  # ~1,100 draws: ~2% standard error
        assert abs(np.mean(both)) < 5 * sd / np.sqrt(both.size)
    else:  # fresh noise: scoring twice differs (unless the head answers the class shares,
        # which a run with too little signal may: one row repeated); the noise has the recorded σ
        again = model.predict(blocks)
        if not np.all(pred.scores == pred.scores[0]):
            assert not np.array_equal(pred.scores, again.scores)
        X = model.prepare(0, blocks[0])
        clean = _message(model, X)
        diff = _message(model, X) - clean
        assert np.std(diff) == pytest.approx(np.sqrt(2) * rel["sigma"], rel=0.1)
    # the reproduction mode: same seed, same scores; no ε printed for seeded noise
    a = securevfl.load_model(out, noise_seed=7).predict(blocks)
    b = securevfl.load_model(out, noise_seed=7).predict(blocks)
    assert np.array_equal(a.scores, b.scores)
    assert a.record["privacy"]["scored_rows_epsilon"] is None
    assert "not a guarantee" in a.record["privacy"]["not_a_guarantee"]
    if pbm:
        # cards whose release leaves training's ranges (or differs by party): one line, exit 2
        for i, card in enumerate(sorted(out.glob("party_*/card.json"))):
            doc = json.loads(card.read_text())
            doc["meta"]["release"]["b"] = 0
            card.write_text(json.dumps(doc))
            rc = main(["predict", "--model", str(out)])
            err = capsys.readouterr().err.strip().splitlines()
            want = "b an integer in" if i == model.n_parties - 1 else "must carry one release"
            assert rc == 2 and len(err) == 1 and want in err[0], err
    if method in ("afe-vfl", "vafl-dp"):  # the clip (and rescaling) replayed as released
        _check_clipped_release(model, record, X)


class _NoNoise:
    """A noise generator whose Gaussian draws are 0 (everything else its wrapped one's)."""

    def __init__(self, rng) -> None:
        self.rng = rng

    def normal(self, loc=0.0, scale=1.0, size=None):
        return np.zeros(size) + loc

    def __getattr__(self, name):
        return getattr(self.rng, name)


# the label holder holds columns: its own bottom's embedding enters its head unreleased
ACTIVE = {"parties": 3, "active_features": True}


@pytest.mark.parametrize(
    "opts",
    [
        *[{"method": m, **o} for m, o in CLIPPED],
        {"method": "afe-vfl", **CLIPPED[2][1], **ACTIVE},
        {"method": "afe-vfl", **CLIPPED[1][1], "clip_mode": "soft"},
    ],
    ids=lambda o: "-".join(map(str, o.values())),
)
def test_noisy_scoring_replays_the_runs_release_exactly(tmp_path, monkeypatch, opts):
    """With the embeddings' Gaussian draws zeroed in training and in predict, what is left of
    the release (the clip, afe-vfl's final DP rescaling, the label holder's input scaling, own
    columns and standardisation) must give training's test scores bit for bit: predict
    replays every deterministic step of the mechanism a test row went through."""
    import securevfl.context
    import securevfl.model.files
    import securevfl.rng

    real = securevfl.rng.make_noise_rng

    def zeroed(*a, **kw):  # the embeddings' noise only (afe-vfl's statistics stay noisy)
        rng = real(*a, **kw)
        return _NoNoise(rng) if kw["purpose"].endswith(("embedding", "predict")) else rng

    save, trained = securevfl.model.files.save_parts, []

    def keep_scores(*a, **kw):  # training's own test scores, as it saves the model
        trained.append(a[5].test_scores)
        return save(*a, **kw)

    monkeypatch.setattr(securevfl.rng, "make_noise_rng", zeroed)
    monkeypatch.setattr(securevfl.context, "make_noise_rng", zeroed)
    monkeypatch.setattr(securevfl.model.files, "save_parts", keep_scores)
    # the reproduction mode: the statistics' noise, hence R's factors, fixed by the seed
    record, out = _train(tmp_path, model="mlp", epochs=2, reproducible_noise=True, **opts)
    model = securevfl.load_model(out)
    scores, y = model.predict_test_split()
    assert np.array_equal(scores, trained[0])  # bit for bit
    if opts.get("release_schedule") == "split" and opts["method"] == "afe-vfl":
        factors = [p.meta["release"].get("rescale") for p in model.parts.values() if p.party < 3]
        factors = [f for f in factors if f is not None]  # the passive parties' (not the holder's)
        assert len(factors) == 2 and factors != [1.0, 1.0]  # R's factors were replayed
    assert classes_digest(model.task, scores) == model.card["test_classes_sha256"]
    assert metrics_for(model.task, y, scores) == pytest.approx(record["metrics"], abs=1e-12)


def _message(model, X: np.ndarray) -> np.ndarray:
    """Party 0's message for ``X`` (a cascade client's decoded from its uplink bytes)."""
    got = model.message(0, X)
    return decode(got) if isinstance(got, bytes) else got


def _check_clipped_release(model, record, X: np.ndarray) -> None:
    """Party 0's scored message in the reproduction mode equals a numpy computation of the
    mechanism: its bottom's rows clipped to norm C (Eq. 2), afe-vfl's R: times the factor the
    run recorded and clipped again, plus the seeded draw of N(0, σ²)."""
    import torch

    from securevfl.model.layers import rebuild_layers
    from securevfl.rng import make_noise_rng

    part = model.parts[0]
    rel = part.meta["release"]
    C = rel["clip"]["bound"]
    assert rel["sensitivity"] == pytest.approx(2 * C) and rel["clip"]["mode"] == "hard"
    with torch.no_grad():
        h = rebuild_layers(part.meta["bottom_layers"], part.arrays, "bottom.")(
            torch.as_tensor(X, dtype=torch.float32)
        ).numpy()

    def clip(v: np.ndarray) -> np.ndarray:
        n = np.linalg.norm(v, axis=1, keepdims=True)
        return np.where(n > C, v * (C / (n + 1e-7)), v)

    u = clip(h.astype(np.float64))
    factors = record["extra"].get("rescale_factor")
    if factors is not None:  # the split schedule's R: the factor the record names
        assert rel["rescale"] == pytest.approx(factors["0"])
        u = clip(rel["rescale"] * u)
    assert np.all(np.linalg.norm(u, axis=1) <= C * (1 + 1e-6))
    noise = make_noise_rng(11, purpose="noise/predict", party=0).normal(0.0, rel["sigma"], u.shape)
    got = _message(securevfl.load_model(model.parts[0].path.parent, noise_seed=11), X)
    np.testing.assert_allclose(got, u + noise, rtol=1e-5, atol=1e-5)


def _pbm_estimates(model, blocks, seeded) -> tuple:
    """(each sender's plain embeddings, two fresh estimates of their sum, the estimates of the
    two ``seeded`` models)."""
    import torch

    from securevfl.model.layers import rebuild_layers
    from securevfl.model.predict_pbm import pbm_aggregate, pbm_release
    from securevfl.runtime import InProcessRuntime

    rel = pbm_release(model.parts)
    prepared = {k: model.prepare(k, blocks[k]) for k in rel["senders"]}
    embs = []
    for k in rel["senders"]:
        part = model.parts[k]
        bottom = rebuild_layers(part.meta["bottom_layers"], part.arrays, "bottom.")
        with torch.no_grad():
            embs.append(bottom(torch.as_tensor(prepared[k], dtype=torch.float32)).numpy())

    def est(m):
        return pbm_aggregate(m, rel, prepared, InProcessRuntime(m.n_parties))

    return embs, est(model), est(model), [est(m) for m in seeded]


def _card_csvs(tmp_path: Path, model, n: int = 50) -> list[Path]:
    """``n`` breast rows as one CSV per data party (the card's encoded column names plus an ID
    column), each party's rows in its own order."""
    ds = load_dataset("breast", seed=0)
    rng = np.random.default_rng(3)
    paths = []
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


def test_predict_prints_the_per_row_epsilon_of_a_noisy_model(tmp_path, capsys):
    _, out = _train(tmp_path, method="ldp-vfl", model="mlp", epochs=1, epsilon=6.0)
    new = _card_csvs(tmp_path, securevfl.load_model(out))
    rc = main(
        ["predict", "--model", str(out), "--dataset", f"csv:{new[0]},{new[1]}"]
        + ["--id-column", "ID", "--out", str(tmp_path / "s.csv"), "--json"]
    )
    rec = json.loads(capsys.readouterr().out)
    assert rc == 0 and rec["privacy"]["scored_rows_epsilon"] == pytest.approx(6.0, rel=1e-3)
    assert rec["privacy"]["unit"] == "party-row" and rec["rows"] == 50
    rc = main(["predict", "--model", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and "ε = 6 per scored row" in text and "not compared" in text


def test_save_refuses_to_overwrite(tmp_path, capsys):
    _, out = _train(tmp_path, method="vfl", epochs=1)
    rc = main(["run", "vfl", "--dataset", "breast", "--epochs", "1", "--save", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "must not overwrite" in err[0]


def test_no_model_file_holds_a_pickle_stream(tmp_path):
    _, out = _train(tmp_path, method="vfl", model="mlp", epochs=1)
    for f in out.rglob("*"):
        if f.is_dir():
            continue
        data = f.read_bytes()
        assert not data.startswith(b"\x80")  # a pickle protocol-2+ stream's first opcode
        if f.suffix == ".npy":
            assert data.startswith(b"\x93NUMPY")
            assert not np.load(f, allow_pickle=False).dtype.hasobject
        else:
            assert f.name == "card.json"
            json.loads(data)


# -- new rows from per-party CSVs ------------------------------------------------------------


def _phishing_csvs(tmp_path: Path) -> tuple[list[Path], list[Path], dict[str, int]]:
    """Phishing split into two parties' CSVs with an ID column: training files (rows shuffled
    differently per party, each with extra IDs) and new rows (again shuffled per party)."""
    ds = load_dataset("phishing", seed=0)
    rng = np.random.default_rng(7)
    keep = rng.permutation(len(ds.y))[:4000]  # 3000 training rows: a fast PSI
    X, y = ds.X[keep], ds.y[keep]
    n = len(y)
    ids = rng.permutation(10 * n)[:n] + 1000  # IDs unrelated to row order
    new = np.zeros(n, bool)
    new[rng.permutation(n)[:1000]] = True
    cols = [list(range(12)), list(range(12, X.shape[1]))]
    names = [f"f{j}" for j in range(X.shape[1])]
    train_paths, new_paths = [], []
    for k in (0, 1):
        for which, paths in ((~new, train_paths), (new, new_paths)):
            rows = np.flatnonzero(which)
            rows = rows[rng.permutation(len(rows))]
            rows = rows[: len(rows) - 40 * k]  # party 1 lacks some IDs: partial overlap
            p = tmp_path / f"{'train' if paths is train_paths else 'new'}{k}.csv"
            with p.open("w", newline="") as f:
                w = csv.writer(f)
                w.writerow(
                    [
                        "ID",
                        *(["label"] if k == 0 and paths is train_paths else []),
                        *[names[j] for j in cols[k]],
                    ]
                )
                for i in rows:
                    lab = [int(y[i])] if k == 0 and paths is train_paths else []
                    w.writerow([int(ids[i]), *lab, *[repr(float(v)) for v in X[i, cols[k]]]])
            paths.append(p)
    truth = {str(int(ids[i])): int(y[i]) for i in np.flatnonzero(new)}
    return train_paths, new_paths, truth


@pytest.mark.parametrize("method", ["vfl", "hdp-vfl"])
def test_predict_new_rows_from_shuffled_csvs(tmp_path, method, capsys):
    train, new, truth = _phishing_csvs(tmp_path)
    model_dir, out = tmp_path / "model", tmp_path / "scores.csv"
    args = [
        "run",
        method,
        "--dataset",
        "csv:" + ",".join(map(str, train)),
        "--id-column",
        "ID",
        "--seed",
        "1",
        "--save",
        str(model_dir),
    ]
    if method == "hdp-vfl":
        args += ["--epsilon", "8"]
    assert main(args) == 0
    rc = main(
        [
            "predict",
            "--model",
            str(model_dir),
            "--dataset",
            "csv:" + ",".join(map(str, new)),
            "--id-column",
            "ID",
            "--out",
            str(out),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    with out.open() as f:
        rows = list(csv.DictReader(f))
    common = set.intersection(*[{r[0] for r in list(csv.reader(p.open()))[1:]} for p in new])
    assert [r["id"] for r in rows] == sorted(common, key=int)  # one row per common ID
    acc = np.mean([int(r["class"]) == truth[r["id"]] for r in rows])
    assert acc >= 0.85, acc


def _saved_csv_model(tmp_path: Path) -> tuple[Path, list[Path]]:
    train, new, _ = _phishing_csvs(tmp_path)
    model_dir = tmp_path / "model"
    spec = build_spec(
        {
            "method": "vfl",
            "dataset": "csv:" + ",".join(map(str, train)),
            "id_column": "ID",
            "seed": 1,
            "epochs": 2,
        }
    )
    securevfl.run_experiment(spec, save=str(model_dir))
    return model_dir, new


def _predict_err(capsys, model_dir, paths, tmp_path) -> tuple[int, list[str]]:
    rc = main(
        [
            "predict",
            "--model",
            str(model_dir),
            "--dataset",
            "csv:" + ",".join(map(str, paths)),
            "--id-column",
            "ID",
            "--out",
            str(tmp_path / "s.csv"),
        ]
    )
    return rc, capsys.readouterr().err.strip().splitlines()


def test_refusals_exit_2_with_one_line(tmp_path, capsys):
    model_dir, new = _saved_csv_model(tmp_path)
    # a mismatched schema: a renamed or a missing column (reordered columns are matched by
    # name: tests/test_predict_encoders.py)
    text = new[1].read_text().splitlines()
    header = text[0].split(",")
    variants = {
        "renamed": ([",".join([header[0], "other", *header[2:]])] + text[1:], header[1]),
        "count": ([",".join(r.split(",")[:-1]) for r in text], header[-1]),
    }
    for name, (lines, column) in variants.items():
        bad = tmp_path / f"{name}.csv"
        bad.write_text("\n".join(lines) + "\n")
        rc, err = _predict_err(capsys, model_dir, [new[0], bad], tmp_path)
        assert rc == 2 and len(err) == 1, (name, err)
        assert f"must have the model's column {column!r}" in err[0] and bad.name in err[0]
    # the parties' files swapped: each is refused against the other party's card
    rc, err = _predict_err(capsys, model_dir, [new[1], new[0]], tmp_path)
    assert rc == 2 and len(err) == 1 and "must have the model's column" in err[0]
    # a party's model used for another party's block
    swapped = tmp_path / "swapped"
    shutil.copytree(model_dir, swapped)
    (swapped / "party_0").rename(swapped / "tmp")
    (swapped / "party_1").rename(swapped / "party_0")
    (swapped / "tmp").rename(swapped / "party_1")
    rc, err = _predict_err(capsys, swapped, new, tmp_path)
    assert rc == 2 and len(err) == 1 and "another party" in err[0]
    # an altered file
    tampered = tmp_path / "tampered"
    shutil.copytree(model_dir, tampered)
    w = tampered / "party_1" / "w.npy"
    data = bytearray(w.read_bytes())
    data[-1] ^= 1
    w.write_bytes(bytes(data))
    rc, err = _predict_err(capsys, tampered, new, tmp_path)
    assert rc == 2 and len(err) == 1 and "w.npy" in err[0] and "sha256" in err[0]
    # an unknown format version
    card = tampered / "party_1" / "card.json"
    shutil.copy(model_dir / "party_1" / "w.npy", w)
    c = json.loads(card.read_text())
    c["format_version"] = 99
    card.write_text(json.dumps(c))
    rc, err = _predict_err(capsys, tampered, new, tmp_path)
    assert rc == 2 and len(err) == 1 and "format_version" in err[0] and "card.json" in err[0]
    # a card missing a field scoring reads
    c["format_version"] = 1
    card.write_text(json.dumps(c))
    shutil.copy(model_dir / "party_0" / "card.json", tampered / "party_0" / "card.json")
    c0 = json.loads((tampered / "party_0" / "card.json").read_text())
    del c0["meta"]["link"]
    (tampered / "party_0" / "card.json").write_text(json.dumps(c0))
    rc, err = _predict_err(capsys, tampered, new, tmp_path)
    assert rc == 2 and len(err) == 1 and "must have meta link" in err[0], err


def _edit_card(path: Path, edit) -> None:
    card = json.loads(path.read_text())
    edit(card)
    path.write_text(json.dumps(card))


def test_layer_and_release_cards_are_checked_before_use(tmp_path, capsys):
    """A CNN card announcing a convolution far larger than its array is refused before any
    module is allocated (2^20 x 2^20 x 3 x 3 floats would not fit); a noisy part whose release
    claims less than its clip's 2C sensitivity, or an unknown clip, is refused: one line,
    exit 2."""
    _, out = _train(tmp_path, method="vfl", model="cnn", dataset="digits", epochs=1)
    card = out / "party_1" / "card.json"
    conv = [i for i, s in enumerate(json.loads(card.read_text())["meta"]["bottom_layers"])
            if s["type"] == "conv2d"][0]  # fmt: skip

    def huge(c):
        c["meta"]["bottom_layers"][conv].update({"in": 1 << 20, "out": 1 << 20})

    _edit_card(card, huge)
    rc = main(["predict", "--model", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"bottom.{conv}.weight" in err[0], err
    assert "must have shape" in err[0]

    _, noisy = _train(tmp_path / "n", method="vafl-dp", model="mlp", epochs=1, epsilon=6.0)
    for key, value, says in (
        ("sensitivity", 1.0, "must be >= 2 x its clip bound"),
        ("clip", {"mode": "tanh", "bound": 1.0}, "clip mode must be in"),
    ):
        tampered = tmp_path / f"t-{key}"
        shutil.copytree(noisy, tampered)
        for k in (0, 1, 2):
            _edit_card(tampered / f"party_{k}" / "card.json",
                       lambda c, kv={key: value}: c["meta"]["release"].update(kv))  # fmt: skip
        rc = main(["predict", "--model", str(tampered)])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and says in err[0], err


def test_python_api_predicts_raw_rows(tmp_path):
    model_dir, new = _saved_csv_model(tmp_path)
    model = securevfl.load_model(model_dir)
    blocks = [np.loadtxt(p, delimiter=",", skiprows=1)[:, 1:] for p in new]
    n = min(len(b) for b in blocks)  # the first rows of each file are different IDs: any rows
    pred = model.predict([b[:n] for b in blocks])
    assert pred.scores.shape == (n,) and set(np.unique(pred.classes)) <= {-1, 1, 0}
    assert pred.record["privacy"]["scored_rows_epsilon"] is None
    assert pred.record["bytes_per_row"] > 0


# -- three hosts: each loads only its own part, over mutual TLS on loopback --------------------

ROOT = Path(__file__).resolve().parents[1]


def _cli(args: list[str]):
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "bench.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )


def _all(procs, timeout=180):
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0] * len(procs), [e for _, e in outs]
    return outs


@pytest.mark.networked
def test_three_hosts_save_and_predict_over_tls(tmp_path):
    from protocols.certs import make_certs
    from securevfl.runtime.launcher import free_ports

    certs, model_dir = tmp_path / "certs", tmp_path / "model"
    make_certs(str(certs), 3)
    run = ["vfl", "--dataset", "breast", "--parties", "3", "--epochs", "2", "--seed", "4"]

    def net(i: int) -> list[str]:
        return ["--index", str(i), "--certs", str(certs), "--timeout", "60"]

    addresses = [f"127.0.0.1:{p}" for p in free_ports(3)]
    peers = [x for a in addresses for x in ("-P", a)]
    _all([_cli(["party", *run, *net(i), *peers, "--save", str(model_dir)]) for i in range(3)])
    model = securevfl.load_model(model_dir)
    # new rows: each party's columns under its card's names, IDs shuffled per party, party 2
    # lacks 10 of them
    ds = load_dataset("breast", seed=0)
    rng = np.random.default_rng(1)
    paths = []
    for k in range(3):
        cols = model.parts[k].card["columns"]
        rows = rng.permutation(len(ds.y))[: len(ds.y) - 10 * (k == 2)]
        p = tmp_path / f"new{k}.csv"
        with p.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["ID", *cols["names"]])
            for i in rows:
                w.writerow([f"c{i:05d}", *[repr(float(v)) for v in ds.X[i, cols["indices"]]]])
        paths.append(p)
    local = model.predict_csv(paths, "ID")
    addresses = [f"127.0.0.1:{p}" for p in free_ports(3)]
    peers = [x for a in addresses for x in ("-P", a)]
    out = tmp_path / "scores.csv"
    procs = [
        _cli(
            [
                "predict",
                "--model",
                str(model_dir / f"party_{i}"),
                "--dataset",
                f"csv:{paths[i]}",
                "--id-column",
                "ID",
                *net(i),
                *peers,
                "--run-id",
                "p",
                "--json",
            ]
            + (["--out", str(out)] if i == 0 else [])
        )
        for i in range(3)
    ]
    outs = _all(procs)
    rec = json.loads(outs[0][0])
    assert rec["rows"] == len(ds.y) - 10 and rec["runtime"] == "processes"
    assert rec["sent_per_row"]["1"] == rec["sent_per_row"]["2"] > 0  # one float64 each, framed
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert [r["id"] for r in rows] == local.ids
    assert np.array_equal([float(r["score"]) for r in rows], local.scores)


def test_new_rows_are_prepared_exactly_as_training_prepared_them(tmp_path):
    """Raw CSV values through the card's scaling equal the registered table's columns."""
    train, _, _ = _phishing_csvs(tmp_path)
    name = "csv:" + ",".join(map(str, train))
    spec = build_spec({"method": "vfl", "dataset": name, "id_column": "ID", "seed": 1, "epochs": 1})
    securevfl.run_experiment(spec, save=str(tmp_path / "m"))
    model = securevfl.load_model(tmp_path / "m")
    ds = load_dataset(name, seed=0)  # the registered table: rows in the aligned (ID) order
    from securevfl.data.alignment import align_tables, read_party_csv
    from securevfl.runtime import InProcessRuntime

    tables = {k: read_party_csv(p, "ID", k) for k, p in enumerate(train)}
    kept, _ = align_tables(InProcessRuntime(2), tables, workers=1)
    for k, t in kept.items():
        raw = np.array([r[1:] for r in t.rows], dtype=float)
        if k == 0:
            raw = raw[:, 1:]  # the label column
        cols = model.columns(k)["indices"]
        got = model.prepare(k, raw) * np.sqrt(model.bound_sq)
        assert np.allclose(got, ds.X[:, cols], atol=1e-12, rtol=0)


def test_centred_model_predicts_new_rows(tmp_path):
    train, new, truth = _phishing_csvs(tmp_path)
    spec = build_spec(
        {
            "method": "vfl",
            "dataset": "csv:" + ",".join(map(str, train)),
            "id_column": "ID",
            "seed": 1,
            "center": True,
        }
    )
    securevfl.run_experiment(spec, save=str(tmp_path / "m"))
    model = securevfl.load_model(tmp_path / "m")
    assert any(c is not None for c in model.columns(0)["center"])
    scores, _ = model.predict_test_split(dataset=spec.dataset)  # the card's CSVs are not opened
    assert classes_digest(model.task, scores) == model.card["test_classes_sha256"]
    pred = model.predict_csv(new, "ID")
    acc = np.mean([c == truth[i] for i, c in zip(pred.ids, pred.classes.tolist())])
    assert acc >= 0.85, acc


@pytest.mark.networked
def test_predict_processes_equals_inprocess(tmp_path, capsys):
    model_dir, new = _saved_csv_model(tmp_path)
    out = tmp_path / "s.csv"
    args = [
        "predict",
        "--model",
        str(model_dir),
        "--dataset",
        "csv:" + ",".join(map(str, new)),
        "--id-column",
        "ID",
        "--out",
        str(out),
        "--json",
    ]
    assert main([*args, "--processes"]) == 0, capsys.readouterr().err
    rec = json.loads(capsys.readouterr().out)
    local = securevfl.load_model(model_dir).predict_csv(new, "ID")
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert rec["runtime"] == "processes" and rec["rows"] == len(local.ids) == len(rows)
    assert [r["id"] for r in rows] == local.ids
    assert np.array_equal([float(r["score"]) for r in rows], local.scores)


@pytest.mark.slow
@pytest.mark.networked
def test_pbm_predict_runs_secure_aggregation_over_processes(tmp_path, capsys):
    """pbm-vfl with the label holder's own columns (release-once, 3 parties): one process per
    party, each loading only its part; the passive parties' fresh key agreement and masked
    messages go over the TLS channel, the label holder unmasks the sum. Same rows, the same
    bytes per row and ε per scored row as in one process (the noise is fresh: scores differ)."""
    _, out = _train(
        tmp_path, method="pbm-vfl", model="mlp", epochs=1, parties=3, epsilon=6.0, b=16,
        active_features=True, own_model="columns",  # the own trees (auto) are not saved yet
    )  # fmt: skip
    model = securevfl.load_model(out)
    new = _card_csvs(tmp_path, model)
    args = ["predict", "--model", str(out), "--dataset", "csv:" + ",".join(map(str, new))]
    args += ["--id-column", "ID", "--out", str(tmp_path / "s.csv"), "--json"]
    assert main([*args, "--processes"]) == 0, capsys.readouterr().err
    rec = json.loads(capsys.readouterr().out)
    local = model.predict_csv(new, "ID").record
    assert rec["runtime"] == "processes" and rec["rows"] == local["rows"] == 50
    assert rec["privacy"]["scored_rows_epsilon"] == local["privacy"]["scored_rows_epsilon"]
    assert rec["privacy"]["scored_rows_epsilon"] == pytest.approx(6.0, rel=0.02)
    assert rec["sent_per_row"] == pytest.approx(local["sent_per_row"], rel=0.05)
    assert rec["sent_per_row"]["0"] > 0 and rec["sent_per_row"]["1"] > 0
    # the test split from the command line: ε per scored row printed, classes not compared
    assert main(["predict", "--model", str(out)]) == 0
    text = capsys.readouterr().out
    assert "per scored row" in text and "not compared" in text and "secure sum" in text


def test_predict_bench_reports_throughput_and_bytes_per_row(tmp_path, capsys):
    from bench.predict_bench import main as bench_main

    assert (
        bench_main(
            [
                "--dataset",
                "breast",
                "--rows",
                "2000",
                "--methods",
                "vfl,local",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    assert [r["method"] for r in recs] == ["vfl", "local"]
    assert recs[0]["sent_per_row"]["1"] == pytest.approx(8.0, abs=0.2)  # a float64 per row
    assert recs[1]["bytes_per_row"] == 0  # the active party alone sends nothing
    assert all(r["rows_per_s"] > 0 for r in recs)
    assert "| vfl | 2,000 |" in capsys.readouterr().out


def test_bench_predict_suite_reports_throughput_bytes_and_epsilon(tmp_path, capsys):
    """`securevfl bench --suite predict` (here a tiny copy): predict cells train, save, reload,
    score; the report has the predict table (rows/s, bytes per row by party, ε per row)."""
    from bench.suites import load_suite

    shipped = load_suite("predict")
    assert shipped.extras == ["predict"] and all(c.predict_rows == 100_000 for c in shipped.cells)
    toml = tmp_path / "tiny.toml"
    toml.write_text(
        'name = "predict-tiny"\nseeds = [1]\n[defaults]\ndataset = "breast"\nepochs = 1\n'
        'predict_rows = 3000\n[[cells]]\nmethod = ["vfl", "local"]\n'
        '[[cells]]\nmethod = "ldp-vfl"\nmodel = "mlp"\nepsilon = 6.0\n'
        '[report]\nextras = ["predict"]\n'
    )
    out = tmp_path / "out"
    assert main(["bench", "--suite", str(toml), "--out", str(out), "--no-progress"]) == 0
    lines = (out / "results.jsonl").read_text().splitlines()
    recs = {r["method"]: r for r in map(json.loads, lines)}
    assert sorted(recs) == ["ldp-vfl", "local", "vfl"]
    vfl, local, ldp = recs["vfl"]["predict"], recs["local"]["predict"], recs["ldp-vfl"]["predict"]
    assert vfl["rows"] == 3000 and vfl["rows_per_s"] > 0
    assert vfl["sent_per_row"]["1"] == pytest.approx(8.0, abs=0.2)  # one float64 per row
    assert local["bytes_per_row"] == 0 and vfl["scored_rows_epsilon"] is None
    assert ldp["scored_rows_epsilon"] == pytest.approx(6.0, rel=1e-3)  # release-once: a test row
    report = (out / "report.md").read_text()
    assert "## Scoring with saved models (predict)" in report
    assert "| vfl | 3,000 |" in report and "| ldp-vfl (mlp), ε = 6 | 3,000 |" in report


def test_every_registered_method_saves_and_is_in_an_acceptance_list():
    """Issue 26: every registered method that produces a model saves (no refusal left before
    training) and is trained, saved, reloaded and rescored by one of this file's lists."""
    from securevfl.registry import lookup, names

    covered = {a["method"] for a in EXPORTABLE} | {m for m, _ in NOISY}
    for name in names("method"):
        cls = lookup("method", name)
        assert getattr(cls, "model_export_refusal", None) is None, name
        assert getattr(cls, "export_refusal", None) is None, name
        assert name in covered, name


# -- checkpoints ------------------------------------------------------------------------------


def test_resume_after_a_kill_gives_the_uninterrupted_model(tmp_path):
    import signal
    import time

    from securevfl.model.checkpoint import make_checkpoints

    ck = tmp_path / "ck"
    run = ["run", "vfl", "--dataset", "phishing", "--epochs", "40", "--seed", "3"]
    proc = _cli([*run, "--checkpoint-every", "1", "--checkpoint", str(ck)])
    latest = ck / "party_1" / "latest.json"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if latest.is_file() and int(json.loads(latest.read_text())["dir"][1:]) >= 2:
                proc.send_signal(signal.SIGKILL)  # mid-run: no chance to clean up
                break
            time.sleep(0.02)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    spec = build_spec({"method": "vfl", "dataset": "phishing", "epochs": 40, "seed": 3})
    whole = securevfl.run_experiment(spec)
    ckp = make_checkpoints(spec, every=None, directory=None, resume=str(ck))
    resumed = securevfl.run_experiment(spec, checkpoints=ckp)
    assert resumed["model_fingerprint"] == whole["model_fingerprint"]
    assert len(resumed["stats"]["epoch_s"]) == 40  # the epochs before the kill are kept


def _kill_after_epoch(run: list[str], ck: Path, epoch: int) -> None:
    """Run ``run`` with a checkpoint every epoch and SIGKILL it once epoch ``epoch``'s is whole."""
    import signal
    import time

    proc = _cli([*run, "--checkpoint-every", "1", "--checkpoint", str(ck)])
    latest = ck / "party_1" / "latest.json"
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if latest.is_file() and int(json.loads(latest.read_text())["dir"][1:]) >= epoch:
                proc.send_signal(signal.SIGKILL)  # mid-run: no chance to clean up
                break
            time.sleep(0.02)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"


def test_splitnn_resume_after_a_kill_gives_the_uninterrupted_model(tmp_path):
    """The split-NN trainer: bottoms, head and their Adam moments resume (vfl --model mlp)."""
    from securevfl.model.checkpoint import make_checkpoints

    ck = tmp_path / "ck"
    args = {"method": "vfl", "model": "mlp", "dataset": "breast", "epochs": 8, "seed": 3}
    _kill_after_epoch(
        ["run", "vfl", "--model", "mlp", "--dataset", "breast", "--epochs", "8", "--seed", "3"],
        ck,
        2,
    )
    whole = securevfl.run_experiment(build_spec(dict(args)))
    spec = build_spec(dict(args))
    ckp = make_checkpoints(spec, every=None, directory=None, resume=str(ck))
    resumed = securevfl.run_experiment(spec, checkpoints=ckp)
    assert resumed["model_fingerprint"] == whole["model_fingerprint"]
    assert resumed["metrics"] == whole["metrics"]
    assert len(resumed["stats"]["epoch_s"]) == 8  # the epochs before the kill are kept


def test_a_kill_between_two_parties_saves_resumes_from_their_common_epoch(tmp_path):
    """The parties of one process save one after the other: a kill between them leaves party
    0 an epoch ahead. Each keeps its previous checkpoint, and resume takes the newest epoch
    every party holds (the model still equals an uninterrupted run's)."""
    import shutil

    from securevfl.errors import DataError
    from securevfl.model.checkpoint import make_checkpoints

    ck = tmp_path / "ck"
    args = {"method": "vfl", "model": "mlp", "dataset": "breast", "epochs": 4, "seed": 3}
    spec = build_spec(dict(args))
    whole = securevfl.run_experiment(
        spec, checkpoints=make_checkpoints(spec, every=1, directory=str(ck), resume=None)
    )
    assert sorted(p.name for p in (ck / "party_0").glob("e*")) == ["e2", "e3"]
    # as if killed after party 0 wrote e3 and before party 1 did
    shutil.rmtree(ck / "party_1" / "e3")
    (ck / "party_1" / "latest.json").write_text(json.dumps({"dir": "e2"}))
    resumed = securevfl.run_experiment(
        build_spec(dict(args)),
        checkpoints=make_checkpoints(build_spec(dict(args)), every=None, directory=None,
                                     resume=str(ck)),
    )  # fmt: skip
    assert resumed["model_fingerprint"] == whole["model_fingerprint"]
    assert resumed["metrics"] == whole["metrics"]
    shutil.rmtree(ck / "party_1" / "e2")  # no epoch held by both: one line, exit 2
    with pytest.raises(DataError, match="one epoch saved by every party"):
        securevfl.run_experiment(
            build_spec(dict(args)),
            checkpoints=make_checkpoints(build_spec(dict(args)), every=None, directory=None,
                                         resume=str(ck)),
        )  # fmt: skip


def test_checkpoints_refuse_methods_whose_hooks_hold_state(tmp_path, capsys):
    """hdp-vfl resumes (tests/test_checkpoint_dp.py) except with tune=true, whose
    cross-validation trains many models: refused in one line, naming why."""
    rc = main(
        [
            "run",
            "hdp-vfl",
            "--epsilon",
            "1",
            "--seed",
            "1",
            "--tune",
            "true",
            "--checkpoint-every",
            "1",
            "--checkpoint",
            str(tmp_path / "ck"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "hdp-vfl" in err[0] and "tune=true" in err[0]


def test_splitnn_checkpoints_refuse_a_dp_method(tmp_path, capsys):
    """pbm-vfl on the split-NN trainer: its hooks' state (PBM sampling, secure aggregation's
    masks) is not checkpointed, so --checkpoint-every is refused (ldp-vfl and afe-vfl resume:
    tests/test_checkpoint_dp.py)."""
    rc = main(
        [
            "run",
            "pbm-vfl",
            "--model",
            "mlp",
            "--dataset",
            "breast",
            "--epsilon",
            "4",
            "--b",
            "8",  # the calibrated run's refusal; b = 64's search took 10 CPU-s more
            "--release-schedule",
            "split",
            "--seed",
            "1",
            "--checkpoint-every",
            "1",
            "--checkpoint",
            str(tmp_path / "ck"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "method 'pbm-vfl'" in err[0]
    assert not (tmp_path / "ck").exists()


@pytest.mark.networked
def test_a_model_with_a_helper_party_predicts_over_its_data_parties_processes(tmp_path, capsys):
    """he-vfl's key holder (party 2) holds no part and scores nothing: networked predict runs
    among the two data parties alone and gives the in-process scores."""
    _, out = _train(tmp_path, method="he-vfl", epochs=3)
    model = securevfl.load_model(out)
    assert model.n_parties == 3 and model.data_parties == 2
    new = _card_csvs(tmp_path, model)
    args = ["predict", "--model", str(out), "--dataset", "csv:" + ",".join(map(str, new))]
    args += ["--id-column", "ID", "--out", str(tmp_path / "s.csv"), "--json"]
    assert main([*args, "--processes"]) == 0, capsys.readouterr().err
    rec = json.loads(capsys.readouterr().out)
    local = model.predict_csv(new, "ID")
    with (tmp_path / "s.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert rec["runtime"] == "processes" and rec["rows"] == len(local.ids) == len(rows) == 50
    assert [r["id"] for r in rows] == local.ids
    assert np.array_equal([float(r["score"]) for r in rows], local.scores)
    assert set(rec["sent_per_row"]) == {"0", "1"} and rec["sent_per_row"]["1"] > 0
