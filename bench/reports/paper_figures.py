"""The seed papers' headline numbers, as printed, and which of our records each is read against.

Every :class:`Table` cites its source (seed file in docs/seeds, table or figure) and says in one
line where our run differs and why. A :class:`Row` holds the paper's figure as printed (text, and
the number where there is one) and a selector of our records: ``method``, ``dataset`` and
``attack`` match the record's fields, every other key its ``config``. ``metric`` is one of
``bench.reports.papers.METRICS``. ``ours=None``: the figure is reproduced in the paper's own
section below (its report module), not by one number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

HDP = "HDP-VFL (seed 000, Wang et al.)"
FM = "FM-VFL (seed 003, Xu, Yuan & Wu)"
PBM = "PBM-VFL (seed 004)"
AFE = "VFL-AFE (seed 001)"
CZOFO = "VFL-CZOFO (seed 002, poster)"


@dataclass(frozen=True)
class Row:
    setting: str  # what the paper ran, in its words
    paper: str  # the paper's figure as printed
    ours: dict[str, Any] | None  # selector of our records (None: see the paper's section)
    metric: str = "accuracy"
    note: str = ""  # our stand-in, where the data differs


@dataclass(frozen=True)
class Table:
    paper: str
    table: str
    source: str
    differs: str
    rows: tuple[Row, ...] = field(default_factory=tuple)


_LIT = {"center": False, "intercept": "clipped", "batch_size": 3200, "lam": 0.001}


def _hdp(eps: float, **kw: Any) -> dict[str, Any]:
    return {"method": "hdp-vfl", "dataset": "breast", "epsilon": eps, **_LIT, **kw}


def _fm(method: str, ds: str, eps: float, **kw: Any) -> dict[str, Any]:
    if method == "fm-vfl":
        kw.setdefault("parties", 2)
    return {"method": method, "dataset": ds, "epsilon": eps, **kw}


def _pbm(ds: str, b: int, beta: float) -> dict[str, Any]:
    return {"method": "pbm-vfl", "dataset": ds, "b": b, "beta": beta}


def _afe(ds: str, variant: str) -> dict[str, Any]:
    return {"method": "afe-vfl", "dataset": ds, "variant": variant}


_SYN = {"dataset": "synthetic-logistic", "epochs": 1}

TABLES: tuple[Table, ...] = (
    Table(
        HDP,
        "Fig. 1: privacy-accuracy (breast)",
        "000_1d6df8d5ade38c4a.txt, Sec. 6.3 and Fig. 1 (b = 3200, λ = 0.001, e = 10, k = 1)",
        "the paper's figure has no table; its text says 'comparable to non-private at ε >= 10, "
        "about half of it below 0.1'. Ours is sound (derivative clipped where received, Lemmas "
        "3/4 re-derived, private scoring) and paper-literal (uncentred, clipped bias) predicts the "
        "majority class; hdp-vfl's defaults (centred, no bias) are beside it",
        (
            Row("ε = 100, paper-literal", "≈ non-private (Fig. 1)", _hdp(100.0)),
            Row("ε = 10, paper-literal", "≈ non-private (Fig. 1)", _hdp(10.0)),
            Row("ε = 0.1, paper-literal", "≈ half of non-private", _hdp(0.1)),
            Row(
                "ε = 10, defaults",
                "—",
                {"method": "hdp-vfl", "dataset": "breast", "epsilon": 10.0, "center": True},
            ),
            Row(
                "ε = 1, defaults",
                "—",
                {"method": "hdp-vfl", "dataset": "breast", "epsilon": 1.0, "center": True},
            ),
            Row("non-private VFL", "lossless reference", {"method": "vfl", "dataset": "breast"}),
        ),
    ),
    Table(
        HDP,
        "Fig. 2: hyper-parameters at ε = 1 (breast)",
        "000_1d6df8d5ade38c4a.txt, Sec. 6.4 and Fig. 2",
        "under our sound bound the paper-literal setting (uncentred, bias clipped with w_A) "
        "predicts the majority class (0.628) or worse at ε = 1 for every e and k tried, so "
        "the paper's trend in e and k does not show; hdp-vfl's defaults (centred, no bias) "
        "reach 0.88 at ε = 1 (Fig. 1 table)",
        (
            Row("e = 5", "≈ 0.9", _hdp(1.0, epochs=5)),
            Row("e = 15", "≈ 0.6", _hdp(1.0, epochs=15)),
            Row("k = 0.1", "≈ 0.5", _hdp(1.0, epochs=10, clip_norm=0.1)),
            Row("k = 0.5", "≈ 0.9", _hdp(1.0, epochs=10, clip_norm=0.5)),
        ),
    ),
    Table(
        HDP,
        "Fig. 3: training seconds vs epochs and n (synthetic)",
        "000_1d6df8d5ade38c4a.txt, Sec. 6.5 and Fig. 3 (n = 10,000; 1 epoch for n up to 100k)",
        "seconds on this machine (2 shared cores); HE-VFL here is CKKS timed on 2 minibatches "
        "and extrapolated (the paper used Paillier); n reduced to 50,000",
        (
            Row(
                "vfl, n = 10k, e = 10",
                "HDP ≈ VFL",
                {"method": "vfl", **_SYN, "epochs": 10, "n": 10000},
                "train_s",
            ),
            Row(
                "hdp-vfl, n = 10k, e = 10",
                "HDP ≈ VFL",
                {"method": "hdp-vfl", **_SYN, "epochs": 10, "n": 10000},
                "train_s",
            ),
            Row(
                "vfl, n = 50k, e = 1", "HDP ≈ VFL", {"method": "vfl", **_SYN, "n": 50000}, "train_s"
            ),
            Row(
                "hdp-vfl, n = 50k, e = 1",
                "HDP ≈ VFL",
                {"method": "hdp-vfl", **_SYN, "n": 50000},
                "train_s",
            ),
            Row(
                "he-vfl, n = 10k, e = 1",
                "HE ≫ HDP",
                {"method": "he-vfl", **_SYN, "n": 10000},
                "train_s",
            ),
        ),
    ),
    Table(
        FM,
        "Table I: linear regression MSE",
        "003_55121e914a86962a.txt, Table I (US census, 370k rows, 14 features; 10 runs)",
        "US/Brazil census are not available offline: cps1988 (US wages, 28k rows) stands in, so "
        "only the pattern (FM close to non-private from ε = 1) is comparable, not the values",
        (
            Row(
                "FM, US, ε = 0.1",
                "0.0101 ± 0.0305",
                _fm("fm-vfl", "cps1988", 0.1),
                "mse",
                "cps1988",
            ),
            Row(
                "FM, US, ε = 1", "0.0087 ± 0.0261", _fm("fm-vfl", "cps1988", 1.0), "mse", "cps1988"
            ),
            Row(
                "FM, US, ε = 10",
                "0.0086 ± 0.0259",
                _fm("fm-vfl", "cps1988", 10.0),
                "mse",
                "cps1988",
            ),
            Row(
                "non-private",
                "0.0044 ± 0.0132",
                {"method": "centralized", "dataset": "cps1988"},
                "mse",
                "cps1988",
            ),
        ),
    ),
    Table(
        FM,
        "Table II: MSE on synthetic d = 800, ε = 1",
        "003_55121e914a86962a.txt, Table II (n = 80,000)",
        "n reduced from 80,000 to 10,000 (one seed) to fit the 60-minute budget: with 8x fewer "
        "rows the same Laplace noise weighs 8x more",
        (
            Row(
                "FM, s = 0.1",
                "0.0035 ± 0.0107",
                _fm("fm-vfl", "synthetic-sparse", 1.0, sparsity=0.1),
                "mse",
            ),
            Row(
                "FM, s = 1.0",
                "0.0056 ± 0.0172",
                _fm("fm-vfl", "synthetic-sparse", 1.0, sparsity=1.0),
                "mse",
            ),
            Row(
                "non-private, s = 0.1",
                "0.0033 ± 0.0101",
                {"method": "centralized", "dataset": "synthetic-sparse", "sparsity": 0.1},
                "mse",
            ),
        ),
    ),
    Table(
        FM,
        "Table III: logistic regression accuracy (adult)",
        "003_55121e914a86962a.txt, Table III (Adult, 41 features)",
        "ours is (ε, 0)-DP with Δ_f for d = 42 as re-derived (Lemma 1), the coefficients from a "
        "Shamir product no party sees in the clear; DPSGD-C at its pre-issue-16 settings",
        (
            Row("FM, Adult, ε = 0.1", "0.6412 ± 0.1463", _fm("fm-vfl", "adult", 0.1, center=False)),
            Row("FM, Adult, ε = 1", "0.7315 ± 0.0379", _fm("fm-vfl", "adult", 1.0, center=False)),
            Row("FM, Adult, ε = 10", "0.8132 ± 0.0231", _fm("fm-vfl", "adult", 10.0, center=False)),
            Row("DPSGD-C, ε = 1", "0.6956 ± 0.0229", _fm("dpsgd-c", "adult", 1.0)),
            Row("DPSGD-C, ε = 10", "0.8023 ± 0.0071", _fm("dpsgd-c", "adult", 10.0)),
            Row("non-private", "0.8368 ± 0.0029", {"method": "centralized", "dataset": "adult"}),
        ),
    ),
    Table(
        FM,
        "Table IV: runtime at ε = 1 (seconds)",
        "003_55121e914a86962a.txt, Table IV (MPyC, 128-bit keys, one server GPU machine)",
        "our cross-party products are one Shamir matrix product per block (residue fields, BLAS) "
        "instead of the paper's per-coefficient MPyC inner products, hence seconds, not minutes",
        (
            Row("adult, K = 1", "0.39", _fm("fm-central", "adult", 1.0, center=False), "train_s"),
            Row(
                "adult, K = 2",
                "122.7",
                _fm("fm-vfl", "adult", 1.0, center=False, parties=2),
                "train_s",
            ),
            Row(
                "adult, K = 4",
                "350.7",
                _fm("fm-vfl", "adult", 1.0, center=False, parties=4),
                "train_s",
            ),
            Row(
                "US, K = 2", "93.1", _fm("fm-vfl", "cps1988", 1.0, parties=2), "train_s", "cps1988"
            ),
            Row(
                "US, K = 4", "244.4", _fm("fm-vfl", "cps1988", 1.0, parties=4), "train_s", "cps1988"
            ),
        ),
    ),
    Table(
        PBM,
        "Table 3: epochs to train target (phishing, 5 clients)",
        "004_5275467efee2af02.txt, Appendix C.2 Table 3 (target: train AUPRC 0.9)",
        "our curve is train accuracy (target 0.9), not AUPRC; ε here is PBM's exact PLD figure "
        "for the pmf as run, not the paper's Theorem 6.2 bound",
        (
            Row(
                "b = 16, β = 0.1",
                "98 epochs, 2.54 GB",
                _pbm("phishing", 16, 0.1),
                "epochs_to_target",
            ),
            Row(
                "b = 16, β = 0.25",
                "8 epochs, 0.21 GB",
                _pbm("phishing", 16, 0.25),
                "epochs_to_target",
            ),
            Row(
                "b = 64, β = 0.1",
                "15 epochs, 0.40 GB",
                _pbm("phishing", 64, 0.1),
                "epochs_to_target",
            ),
            Row(
                "b = 64, β = 0.25",
                "2 epochs, 0.05 GB",
                _pbm("phishing", 64, 0.25),
                "epochs_to_target",
            ),
            Row(
                "NPQ",
                "2 epochs, 0.09 GB",
                {"method": "npq", "dataset": "phishing"},
                "epochs_to_target",
            ),
        ),
    ),
    Table(
        PBM,
        "Tables 1-2: epochs to 80 % train accuracy (CIFAR-10 / Activity)",
        "004_5275467efee2af02.txt, Table 1 (CIFAR-10, 4 parties) and Table 2 (Activity, 5 clients)",
        "CIFAR-10 and Activity are not available offline: digits in 4 column blocks stands in "
        "(MLP bottoms, not the paper's ResNet), so only the trend in b and β compares",
        (
            Row(
                "b = 8, β = 0.1",
                "64 epochs, 725 MB",
                _pbm("digits", 8, 0.1),
                "epochs_to_target",
                "digits",
            ),
            Row(
                "b = 8, β = 0.15",
                "38 epochs, 430 MB",
                _pbm("digits", 8, 0.15),
                "epochs_to_target",
                "digits",
            ),
            Row(
                "b = 16, β = 0.1",
                "41 epochs, 470 MB",
                _pbm("digits", 16, 0.1),
                "epochs_to_target",
                "digits",
            ),
            Row(
                "b = 16, β = 0.15",
                "30 epochs, 345 MB",
                _pbm("digits", 16, 0.15),
                "epochs_to_target",
                "digits",
            ),
            Row(
                "NPQ",
                "21 epochs, 4300 MB",
                {"method": "npq", "dataset": "digits"},
                "epochs_to_target",
                "digits",
            ),
            Row("Activity b = 64, β = 0.25", "10 epochs, 0.22 GB", None),
        ),
    ),
    Table(
        AFE,
        "Table 2: ablation, test accuracy %",
        "001_fe68734aaebd4355.txt, Table 2 (UCI column; MNIST column)",
        "digits (8x8) stands in for MNIST, MLP bottoms for the paper's CNNs; our ε is the "
        "accountant's over every embedding release (δ = 1e-5), the paper fixes the noise scale. "
        "Measured here: on digits afe-vfl stays near chance at ε = 100 (also 12.8 % at ε = 1000, "
        "seed 0) while the non-private split-NN reaches 92.8 %; on adult one epoch gives the "
        "majority-class rate (about 76 %) for every variant",
        (
            Row(
                "UCI, vanilla", "77.16", _afe("adult", "vanilla"), "accuracy_pct", "adult, 1 epoch"
            ),
            Row("UCI, +R", "79.02", _afe("adult", "r"), "accuracy_pct", "adult, 1 epoch"),
            Row("UCI, +D", "77.70", _afe("adult", "d"), "accuracy_pct", "adult, 1 epoch"),
            Row("UCI, VFL-AFE", "79.31", _afe("adult", "full"), "accuracy_pct", "adult, 1 epoch"),
            Row("MNIST, vanilla", "90.48", _afe("digits", "vanilla"), "accuracy_pct", "digits"),
            Row("MNIST, +R", "95.12", _afe("digits", "r"), "accuracy_pct", "digits"),
            Row("MNIST, +D", "92.51", _afe("digits", "d"), "accuracy_pct", "digits"),
            Row("MNIST, VFL-AFE", "96.53", _afe("digits", "full"), "accuracy_pct", "digits"),
        ),
    ),
    Table(
        AFE,
        "Tables 1 and 3: membership inference, overheads",
        "001_fe68734aaebd4355.txt, Table 1 (MI attack accuracy %) and Table 3 (ms, 5000 CIFAR)",
        "our MI attack is the shadow-model attack on the trained model's outputs (suite attacks); "
        "overheads: the AFE section below times every part of a step on this machine",
        (
            Row(
                "MI, MNIST, unprotected",
                "62.36",
                {"method": "vfl", "dataset": "digits", "attack": "membership"},
                "accuracy_pct",
                "digits",
            ),
            Row(
                "MI, MNIST, VFL-AFE",
                "53.19",
                {"method": "afe-vfl", "dataset": "digits", "attack": "membership"},
                "accuracy_pct",
                "digits",
            ),
            Row("overheads: VFL / +noise / +R / +D", "349.89 / 60.43 / 279.76 / 82.04 ms", None),
        ),
    ),
    Table(
        CZOFO,
        "Table 3: test accuracy % and total MB (MNIST)",
        "002_efbb6e37514e9d24.txt, Table 3",
        "digits (8x8, 10 epochs, one seed) stands in for MNIST; bytes are the serialized bytes "
        "that crossed our channel, so the MB are of a far smaller model; Table 2 (Theorem 4.1's "
        "heuristic figure by q) is in the CZOFO section below",
        (
            Row(
                "split learning",
                "98.03, 5859 MB",
                {"method": "vfl", "dataset": "digits", "model": "mlp"},
                "accuracy_pct_mb",
                "digits",
            ),
            Row(
                "Compressed-VFL",
                "98.17, 3663 MB",
                {"method": "compressed-vfl", "dataset": "digits"},
                "accuracy_pct_mb",
                "digits",
            ),
            Row(
                "VAFL",
                "97.36, 6144 MB",
                {"method": "vafl", "dataset": "digits"},
                "accuracy_pct_mb",
                "digits",
            ),
            Row(
                "ZOO-VFL",
                "85.62",
                {"method": "zoo-vfl", "dataset": "digits"},
                "accuracy_pct_mb",
                "digits",
            ),
            Row(
                "VFL-CZOFO, q = 10",
                "95.00, 790 MB",
                {"method": "czofo-vfl", "dataset": "digits", "q": 10},
                "accuracy_pct_mb",
                "digits",
            ),
        ),
    ),
)
