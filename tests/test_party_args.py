"""`securevfl party` checks its own arguments before it connects to anyone (no waiting)."""

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
