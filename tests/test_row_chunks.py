"""The label holder's n-vectors kept small (issue 44): a GLM step's per-row work in row chunks,
noise drawn into the message, labels and positions in compact types, all the same numbers as
the whole-array forms they replace."""

from __future__ import annotations

import numpy as np
import pytest

import securevfl.training.glm_rows as glm_rows
from securevfl.data.resident import class_indices
from securevfl.data.split import check_split, draw_split
from securevfl.models.glm import make_loss
from securevfl.privacy.noise_stream import NoiseStream


@pytest.mark.parametrize("name", ["logistic", "least-squares"])
def test_chunked_step_equals_the_whole_array_step(name, monkeypatch):
    monkeypatch.setattr(glm_rows, "ROW_CHUNK", 7)  # 100 rows: 15 chunks, the last short
    rng = np.random.default_rng(0)
    loss = make_loss(name)
    own, received = rng.normal(size=100), [rng.normal(size=100), rng.normal(size=100)]
    y = loss.encode_labels(rng.integers(0, 2, 100)) if name == "logistic" else rng.normal(size=100)
    small = glm_rows.compact_labels(y)
    assert small.dtype == (np.int8 if name == "logistic" else np.float64)
    theta = own + sum(received)
    exact, value = glm_rows.derivatives_and_loss(loss, own, received, small)
    np.testing.assert_array_equal(exact, loss.derivative(theta, y))  # bit for bit
    assert value == float(np.mean(loss.value(theta, y)))
    np.testing.assert_array_equal(glm_rows.positive(own, received), theta > 0)


def test_noise_added_in_place_is_the_stream_s_numbers():
    x = np.arange(10.0)
    for m in (10, 4):  # a full chunk (drawn into the result) and a part (from the buffer)
        a, b = (
            NoiseStream(np.random.default_rng(1), 2.5, 10),
            NoiseStream(np.random.default_rng(1), 2.5, 10),
        )
        np.testing.assert_array_equal(a.added(x[:m]), x[:m] + b.take(m))
        np.testing.assert_array_equal(a.added(x), x + b.take(10))  # and the draws after it
        assert a.taken == b.taken == m + 10


def test_positions_and_labels_in_compact_types():
    tr, te = draw_split(1000, rng=np.random.default_rng(2))
    assert tr.dtype == te.dtype == np.int32
    got = check_split(1000, tr.astype(np.int64), te)
    assert got[0].dtype == np.int32 and np.array_equal(got[0], tr)
    with pytest.raises(Exception, match="permutation"):
        check_split(1000, tr, np.r_[te[:-1], tr[0]])  # a repeat in place of a row
    labels = np.random.default_rng(3).choice([-3.0, 0.5, 7.0], 5000)
    classes, index = class_indices(labels)
    want = np.unique(labels, return_inverse=True)
    assert index.dtype == np.int8
    np.testing.assert_array_equal(classes, want[0])
    np.testing.assert_array_equal(index, want[1])


def test_labels_read_a_batch_at_a_time_are_the_column_s_classes(tmp_path, monkeypatch):
    """Numeric labels read in batches (of 40 rows here; one batch holds a single class):
    the classes and indices np.unique gives on the whole column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import securevfl.data.resident as resident

    monkeypatch.setattr(resident, "LABEL_BATCH", 40)
    y = np.r_[np.full(40, 7), np.random.default_rng(5).choice([2, 7, 9], 150)]
    files = []
    for i, part in enumerate((y[:100], y[100:])):
        files.append(str(tmp_path / f"{i}.parquet"))
        pq.write_table(pa.table({"label": part}), files[-1], row_group_size=30)
    classes, index = resident.read_labels(files, "label", "label", str(tmp_path))
    want = np.unique(y.astype(float), return_inverse=True)
    np.testing.assert_array_equal(classes, want[0])
    np.testing.assert_array_equal(index, want[1])
    assert index.dtype == np.int8
