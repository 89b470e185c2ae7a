"""Settings that need more memory than the machine has are refused before allocating."""

import pytest

from bench.cli import main
from securevfl.context import RunSpec
from securevfl.errors import ConfigError
from securevfl.resources import available_memory, check_memory, needs


def test_pbm_accountant_tables_counted_and_refused():
    spec = RunSpec(method="pbm-vfl", options={"b": 1_000_000})
    ((what, nbytes, fix),) = needs(spec, 2)
    assert nbytes == 8 * (2_000_000 + 1) ** 2 and "--b" in fix
    with pytest.raises(ConfigError, match=r"needs at least 29.1 TiB .* available: lower --b"):
        check_memory(spec, 2, available=16 * 2**30)
    check_memory(RunSpec(method="pbm-vfl", options={"b": 64}), 2, available=16 * 2**30)


def test_generated_table_counted():
    spec = RunSpec(method="vfl", dataset="synthetic-logistic", dataset_options={"n": 10**8})
    with pytest.raises(ConfigError, match="data table .* lower --n"):
        check_memory(spec, 2, available=2**30)
    assert available_memory() > 0


def test_cli_refuses_in_one_line(capsys):
    argv = ["run", "vfl", "--dataset", "synthetic-logistic", "--n", "100000000"]
    assert main(argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "data table" in err[0] and "lower --n" in err[0]
