"""The CNN bottom (--model cnn): pixels at their true places, DP-SGD per-example gradients,
refusal off image datasets, the same model in both runtimes."""

import numpy as np
import pytest
import torch
from test_private_bottom import assert_per_example_grads_match_one_row_at_a_time

from bench.cli import main
from securevfl.context import RunSpec
from securevfl.experiment import run_experiment
from securevfl.models.conv_bottom import conv_bottom, pixel_band
from securevfl.models.nets import seeded_init
from securevfl.training.splitnn_trainer import SplitNNState, splitnn_fingerprints


@pytest.mark.parametrize(
    "columns, shape",
    [
        (np.arange(21, 43), (8, 8)),  # the middle third of digits: starts and ends mid-row
        (np.arange(0, 262), (28, 28)),  # fashion-mnist's top third: ends mid-row 9
        (np.arange(522, 784), (28, 28)),  # its bottom third: starts mid-row 18
        (np.array([63, 5, 40, 17, 9]), (8, 8)),  # a random partition's scattered columns
        (np.arange(3, 6), (8, 8)),  # within one row: the band still has two rows to pool
    ],
)
def test_each_pixel_lands_at_its_true_place(columns, shape):
    h, w = shape
    m = conv_bottom(columns, shape, 4)
    x = torch.as_tensor(columns + 1.0, dtype=torch.float32).repeat(3, 1)  # pixel p carries p + 1
    img = m.place(x)
    top = int(columns.min()) // w
    assert img.shape == (3, 1, max(int(columns.max()) // w - top + 1, 2), w)
    band = img[1, 0].numpy()
    want = np.zeros(band.shape)
    for p in columns:
        want[p // w - top, p % w] = p + 1
    np.testing.assert_array_equal(band, want)
    assert m(x).shape == (3, 4)


def test_columns_outside_the_image_are_refused():
    with pytest.raises(ValueError, match="pixel indices in"):
        pixel_band([10, 64], (8, 8))


def test_cnn_per_example_gradients_match_one_row_at_a_time():
    rng = np.random.default_rng(0)
    cols = np.arange(21, 43)
    m = seeded_init(conv_bottom(cols, (8, 8), 3, hidden=8, bounded=True), 5)
    x = torch.as_tensor(rng.uniform(-1, 1, size=(6, cols.size)), dtype=torch.float32)
    v = torch.as_tensor(rng.normal(size=(6, 3)), dtype=torch.float32)
    assert_per_example_grads_match_one_row_at_a_time(m, x, v, atol=1e-5)


def test_fingerprint_covers_the_convolutions_and_seeded_init_is_deterministic():
    a, b = (seeded_init(conv_bottom(np.arange(32), (8, 8), 4), 9) for _ in "ab")
    fp = splitnn_fingerprints(SplitNNState(bottoms={0: a}, top=None))
    assert fp == splitnn_fingerprints(SplitNNState(bottoms={0: b}, top=None))
    with torch.no_grad():
        b.net[3].weight[0, 0, 1, 1] += 1e-3  # the second convolution
    assert fp != splitnn_fingerprints(SplitNNState(bottoms={0: b}, top=None))


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["run", "vfl", "--dataset", "breast", "--model", "cnn"], "must be an image dataset"),
        (["run", "hdp-vfl", "--dataset", "digits", "--model", "cnn"], "model for method"),
    ],
)
def test_cnn_is_refused_off_image_data_and_off_split_nn_methods(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "cnn" in err and len(err.splitlines()) == 1
    assert "Traceback" not in err


@pytest.mark.networked
@pytest.mark.slow
@pytest.mark.parametrize(
    "method, extra",
    # afe-vfl's release-once runs the CNN bottoms and their noise in every party process; plain
    # vfl's split-NN exchange over processes is test_networked's (an MLP: same messages)
    [("afe-vfl", {"epsilon": 8.0, "reproducible_noise": True})],
)
def test_cnn_is_identical_in_both_runtimes(method, extra):
    from bench.runner import PLUGINS
    from securevfl.experiment import run_in_processes

    spec = RunSpec(
        method=method, dataset="digits", parties=2, model="cnn", epochs=1, batch_size=64,
        seed=5, timeout=60, dataset_options={"n": 400}, **extra,
    )  # fmt: skip
    net = run_in_processes(spec, plugins=PLUGINS)
    local = run_experiment(spec)
    assert net["runtime"] == "processes" and local["runtime"] == "inprocess"
    assert net["model_fingerprint"] == local["model_fingerprint"]
    assert {"0", "1"} <= set(net["model_fingerprint"])
    assert net["comm"]["bytes_total"] == local["comm"]["bytes_total"] > 0
