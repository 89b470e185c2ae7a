"""`securevfl party` checks its own arguments before it connects to anyone (no waiting)."""

import os

import pytest

from bench.cli import main

TWO = ["-P", "127.0.0.1:5001", "-P", "127.0.0.1:5002"]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--epochs", "0", *TWO], "epochs must be >= 1, got 0"),
        (["-P", "127.0.0.1:5001"], "-P must be given once per party (2 for this method"),
        (
            ["-P", "127.0.0.1:99999", "-P", "127.0.0.1:5002"],
            "port in 1..65535, got '127.0.0.1:99999'",
        ),
        (["-P", "nohostport", "-P", "127.0.0.1:5002"], "HOST:PORT with a port in 1..65535"),
        (["-P", "127.0.0.1:abc", "-P", "127.0.0.1:5002"], "got '127.0.0.1:abc'"),
        (["--index", "5", *TWO], "--index must be in [0, 2), got 5"),
    ],
)
def test_party_refuses_bad_arguments_before_connecting(argv, needle, capsys):
    base = ["party", "vfl", "--timeout", "600"]
    if "--index" not in argv:
        base += ["--index", "0"]
    assert main([*base, *argv]) == 2  # a wait would have taken the 600 s timeout
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and needle in err[0], err


def test_parties_sharing_a_host_cap_their_blas_threads_at_their_share_of_the_cores():
    from threadpoolctl import ThreadpoolController

    from securevfl.party import share_host_cores

    controller = ThreadpoolController()
    before = controller.select(user_api="blas").info()
    try:
        cores = len(os.sched_getaffinity(0))
        assert share_host_cores(2 * cores) == 1  # more parties than cores: one thread each
        assert all(p["num_threads"] == 1 for p in controller.select(user_api="blas").info())
        assert share_host_cores(1) == cores
    finally:
        for p in before:  # this test process's own limits back
            controller.select(user_api="blas", prefix=p["prefix"]).limit(limits=p["num_threads"])
