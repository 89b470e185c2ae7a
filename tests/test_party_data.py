"""A party process holds only its own columns, with the values the whole table would give."""

import numpy as np
import pytest

from securevfl.context import RunSpec
from securevfl.data import load_dataset, split_in_place, train_test_split
from securevfl.data.synthetic import make_linear_regression, make_logistic
from securevfl.experiment import build_views, check_spec

N_CROSS = 40_000  # more rows than one generation block (16,384): the seams are covered


@pytest.mark.parametrize("make", [make_logistic, make_linear_regression])
def test_generated_columns_equal_the_whole_table(make):
    X, y, w = make(N_CROSS, 6, seed=4)
    cols = np.array([1, 4, 5])
    Xc, yc, wc = make(N_CROSS, 6, seed=4, columns=cols)
    assert Xc.shape == (N_CROSS, 3) and np.array_equal(Xc, X[:, cols])
    assert np.array_equal(yc, y) and np.array_equal(wc, w)
    # the stream itself: X is the first n*d uniforms of the seeded generator
    from securevfl.rng import make_rng

    purpose = "synthetic-logistic" if make is make_logistic else "synthetic-linear"
    ref = make_rng(4, purpose=purpose).uniform(-1.0, 1.0, size=(N_CROSS, 6))
    assert np.array_equal(X, ref)


def test_split_in_place_equals_the_copying_split():
    whole = load_dataset("synthetic-logistic", seed=2, n=3000, d=5)
    tr, te = train_test_split(whole, seed=7)
    base = whole.X.copy()
    whole.X = base
    tr2, te2 = split_in_place(whole, seed=7)
    assert np.shares_memory(tr2.X, base) and np.shares_memory(te2.X, base)
    for a, b in ((tr, tr2), (te, te2)):
        assert np.array_equal(a.X, b.X) and np.array_equal(a.y, b.y)


def _spec(**kw):
    base = dict(
        method="hdp-vfl",
        dataset="synthetic-logistic",
        dataset_options={"n": 4000, "d": 12},
        parties=3,
        partition="random",
        epsilon=1.0,
        delta=1e-5,
        seed=3,
        center=True,
        reproducible_noise=True,  # centring draws its released means from the seed: same views
    )
    return RunSpec(**{**base, **kw})


@pytest.mark.parametrize("dataset", ["synthetic-logistic", "cps1988"])
def test_one_party_process_holds_its_share_only(dataset):
    opts = {"n": 4000, "d": 12} if dataset != "cps1988" else {"n": 4000}
    spec = _spec(dataset=dataset, dataset_options=opts)
    method = check_spec(spec)
    info, every, _ = build_views(spec, method, [0, 1, 2])
    for k in range(3):
        _, mine, pooled = build_views(spec, method, [k])
        v, ref = mine[k], every[k]
        assert np.array_equal(v.columns, ref.columns)
        assert np.array_equal(v.X_train, ref.X_train) and np.array_equal(v.X_test, ref.X_test)
        assert (v.y_train is not None) == (k == info.label_party)
        # the arrays this process keeps are its block, not the table
        held = v.X_train if v.X_train.base is None else v.X_train.base
        rows = info.n_train + info.n_test
        assert held.nbytes <= rows * len(ref.columns) * 8 < rows * info.n_features * 8
        with pytest.raises(Exception, match="federated"):
            pooled()


def test_party_peak_memory_is_below_the_table():
    """Measured by tracemalloc (numpy reports its buffers): building one party's view of a
    200k x 20 table (32 MB) split over 4 parties peaked at 15 MB; holding the whole table,
    splitting it and scaling copies of it peaked at 89 MB."""
    import tracemalloc

    n, d = 200_000, 20
    spec = _spec(dataset_options={"n": n, "d": d}, parties=4, center=False)
    method = check_spec(spec)
    tracemalloc.start()
    try:
        _, views, _ = build_views(spec, method, [2])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    share = views[2].X_train.nbytes + views[2].X_test.nbytes
    assert share == n * len(views[2].columns) * 8
    assert peak < 0.75 * n * d * 8, (peak, share)
