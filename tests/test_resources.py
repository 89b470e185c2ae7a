"""Settings that need more memory than the machine has are refused before allocating."""

import pytest

from bench.cli import main
from securevfl.context import RunSpec
from securevfl.errors import ConfigError
from securevfl.runtime.resources import available_memory, check_memory, needs


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


def test_peak_of_a_child_process_is_its_own(tmp_path):
    """ru_maxrss survives fork + exec: a party started by a big launcher reported the
    launcher's size. peak_rss_bytes (VmHWM) counts only the child's own memory."""
    import os
    import subprocess
    import sys

    import numpy as np

    big = np.ones(200 * 2**20 // 8)  # 200 MiB resident in this (the parent) process
    code = "from securevfl.runtime.resources import peak_rss_bytes as p; print(p())"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert big.sum() > 0 and out.returncode == 0, out.stderr
    assert int(out.stdout) < 150 * 2**20  # the child imported numpy; it never held 200 MiB


def test_secure_product_working_memory_counted_per_party():
    spec = RunSpec(method="fm-vfl", dataset="synthetic-logistic", dataset_options={"n": 10**7})
    table, product = needs(spec, 2)
    assert "secure product" in product[0] and product[1] > 2 * 10**7 * 20 * 8  # 20 columns, twice
    assert product[1] < table[1] * 1.1  # one party's columns and O(block), not every share
    assert needs(spec, 4)[1][1] < product[1] * 0.6  # a party's share of the columns
    with pytest.raises(ConfigError, match="secure product's inputs .* lower --n"):
        check_memory(spec, 2, available=table[1] + 2**20)
    check_memory(spec, 2, available=product[1])
