"""Entity alignment of per-party CSVs: `securevfl align`, `--id-column`, input errors, runtimes."""

import csv
import json

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer

from bench.cli import main
from securevfl.context import RunSpec
from securevfl.data.align_files import align_files
from securevfl.errors import ConfigError
from securevfl.experiment import run_experiment
from securevfl.registry import _REGISTRIES


@pytest.fixture(autouse=True)
def _forget_user_datasets():
    before = set(_REGISTRIES.get("dataset", {}))
    yield
    for name in set(_REGISTRIES.get("dataset", {})) - before:
        del _REGISTRIES["dataset"][name]


def _write(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
    return path


def _read(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def _text(values):
    return [repr(float(v)) for v in values]  # round-trips exactly


def _parties(tmp_path, K=3, n=60, seed=0):
    """K files with their own row order, extra IDs and the ID column at different places."""
    rng = np.random.default_rng(seed)
    paths, sets = [], []
    for k in range(K):
        ids = [i for i in range(n) if rng.random() < 0.8] + [1000 * (k + 1) + i for i in range(9)]
        ids = [ids[i] for i in rng.permutation(len(ids))]
        sets.append({str(i) for i in ids})
        rows = [[f"{i * 0.5 + k}", str(i)] if k % 2 else [str(i), f"{i + k}"] for i in ids]
        header = [f"v{k}", "cid"] if k % 2 else ["cid", f"v{k}"]
        paths.append(_write(tmp_path / f"party{k}.csv", header, rows))
    return paths, set.intersection(*sets)


def test_align_writes_each_partys_kept_rows_in_one_order(tmp_path, capsys):
    paths, common = _parties(tmp_path)
    out = tmp_path / "out"
    assert main(["align", "--id-column", "cid", *map(str, paths), "--out", str(out), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["kept"] == len(common) and len(rec["rows"]) == 3
    assert rec["rows"] == [len(_read(p)) - 1 for p in paths]
    assert "intersection size" in rec["revealed"]
    cols = []
    for p in paths:
        got = _read(out / p.name)
        j = got[0].index("cid")
        assert got[0] == _read(p)[0]  # header kept as it was
        cols.append([r[j] for r in got[1:]])
        # every kept row is one of this party's original rows, unchanged
        assert {tuple(r) for r in got[1:]} <= {tuple(r) for r in _read(p)[1:]}
    assert cols[0] == cols[1] == cols[2] and set(cols[0]) == common
    assert rec["comm"]["bytes_total"] > 32 * 3 * sum(rec["rows"][1:])


@pytest.mark.networked
@pytest.mark.slow
def test_align_in_processes_matches_in_process_bytes_and_rows(tmp_path):
    paths, common = _parties(tmp_path, K=3, n=40, seed=3)
    a = align_files(paths, "cid", tmp_path / "a")
    b = align_files(paths, "cid", tmp_path / "b", processes=True, timeout=60)
    assert a["runtime"] == "inprocess" and b["runtime"] == "processes"
    assert a["kept"] == b["kept"] == len(common)
    for key in ("bytes_total", "messages", "rounds", "bytes_by_party"):
        assert a["comm"][key] == b["comm"][key]
    for p in paths:
        assert _read(tmp_path / "a" / p.name) == _read(tmp_path / "b" / p.name)
    # bad input found inside the party processes is still a one-line ConfigError
    _write(paths[1], ["cid", "v"], [["C1", "1"], ["C2", "2"]])
    with pytest.raises(ConfigError, match="party 0's is integer, party 1's is text"):
        align_files(paths, "cid", tmp_path / "c", processes=True, timeout=60)


@pytest.mark.parametrize(
    "p0, p1, needle",
    [
        (
            [["1", "a"], ["2", "b"], ["1", "c"]],
            [["1", "x"]],
            "party 0's ID column 'cid' (p0.csv) must hold distinct IDs, got '1' on lines 2 and 4",
        ),
        ([["1", "a"]], [["9", "x"]], "IDs must intersect, got an empty intersection"),
        (
            [["1", "a"], ["2", "b"]],
            [["C1", "x"], ["2", "y"]],
            "one type at every party: party 0's is integer, party 1's is text",
        ),
        ([["1", "a"]], [["1.0", "x"]], "must hold integers or text, got the decimal number '1.0'"),
        ([["", "a"]], [["1", "x"]], "must not be empty, got an empty value on line 2"),
    ],
)
def test_bad_ids_give_one_line_and_exit_2(tmp_path, capsys, p0, p1, needle):
    a = _write(tmp_path / "p0.csv", ["cid", "f"], p0)
    b = _write(tmp_path / "p1.csv", ["cid", "g"], p1)
    assert main(["align", "--id-column", "cid", str(a), str(b), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and err.startswith("securevfl: error:")


def test_bad_align_options_are_one_line_errors(tmp_path, capsys):
    a = _write(tmp_path / "p0.csv", ["cid"], [["1"]])
    b = _write(tmp_path / "p1.csv", ["cid"], [["1"]])
    base = ["align", "--id-column", "cid", str(a), str(b), "--out", str(tmp_path / "o")]
    assert main([*base, "--workers", "0"]) == 2
    assert "workers must be >= 1, got 0" in capsys.readouterr().err
    assert main(["align", "--id-column", "cid", str(a), "--out", str(tmp_path)]) == 2
    assert "align needs >= 2 party CSV files, got 1" in capsys.readouterr().err
    assert main([*base[:3], str(a), str(tmp_path / "q" / "p0.csv"), "--out", "o"]) == 2
    assert "party CSV file names must be distinct" in capsys.readouterr().err


def test_missing_id_column_names_the_party_and_its_columns(tmp_path, capsys):
    a = _write(tmp_path / "p0.csv", ["cid", "f", "label"], [["1", "0.5", "1"]])
    b = _write(tmp_path / "p1.csv", ["customer", "g"], [["1", "2"]])
    argv = ["run", "vfl", "--dataset", f"csv:{a},{b}", "--id-column", "cid"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "party 1's CSV 'p1.csv' must have the ID column 'cid'" in err
    assert "['customer', 'g']" in err and len(err.splitlines()) == 1
    assert main(["run", "vfl", "--dataset", "breast", "--id-column", "cid"]) == 2
    assert "id_column applies to --dataset csv:... only" in capsys.readouterr().err


def test_breast_split_shuffled_and_padded_trains_the_same_model(tmp_path):
    """Pre-aligned CSVs vs the same rows keyed by ID, shuffled, with extra IDs at each party."""
    d = load_breast_cancer()
    X, y, n = d.data, d.target, len(d.target)
    rng = np.random.default_rng(0)
    ids = [f"c{i:05d}" for i in range(n)]  # sorted by ID = the pre-aligned order
    h0, h1 = [f"a{j}" for j in range(12)] + ["label"], [f"b{j}" for j in range(18)]
    r0 = [_text(X[i, :12]) + [str(y[i])] for i in range(n)]
    r1 = [_text(X[i, 12:]) for i in range(n)]
    pre = (_write(tmp_path / "p0.csv", h0, r0), _write(tmp_path / "p1.csv", h1, r1))
    x0 = [[f"x{i}"] + _text(rng.normal(size=12)) + ["1"] for i in range(40)]
    x1 = [_text(rng.normal(size=18)) + [f"z{i}"] for i in range(70)]
    q0 = [[ids[i]] + r0[i] for i in range(n)] + x0
    q1 = [r1[i] + [ids[i]] for i in range(n)] + x1
    keyed = (
        _write(tmp_path / "q0.csv", ["cid", *h0], [q0[i] for i in rng.permutation(len(q0))]),
        _write(tmp_path / "q1.csv", [*h1, "cid"], [q1[i] for i in rng.permutation(len(q1))]),
    )
    spec = dict(method="vfl", epochs=3, seed=0)
    a = run_experiment(RunSpec(dataset=f"csv:{pre[0]},{pre[1]}", **spec))
    b = run_experiment(RunSpec(dataset=f"csv:{keyed[0]},{keyed[1]}", id_column="cid", **spec))
    assert a["model_fingerprint"] == b["model_fingerprint"] and a["metrics"] == b["metrics"]
    assert a["alignment"] is None
    al = b["alignment"]
    assert al["rows"] == [n + 40, n + 70] and al["kept"] == n
    assert "intersection size" in al["revealed"] and al["comm"]["bytes_total"] > 32 * 3 * n
    assert b["comm"] == a["comm"]  # PSI bytes are reported apart, training traffic unchanged


def test_psi_demo_shows_points_positions_and_the_agreed_order(capsys):
    from bench.demos import psi as demo

    assert main(["demo", "psi", "--parties", "2", "--ids", "5", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "blinded IDs, 5 points x 32 bytes" in out and "positions of its points kept" in out
    assert "agreed order of the intersection" in out and "bytes on the wire" in out
    assert demo.NAME == "psi"


@pytest.mark.parametrize(
    "ids",
    [
        ["1", "-2", "+3", "40"],
        ["1", "2.0"],
        ["1", ".5", "5.", "1e3", "-2E-1"],
        ["1", "a"],
        ["12\n", "3"],  # a newline inside an ID (a quoted CSV field): the per-ID path
        ["1", "2\n3"],
        ["\u0663", "7"],  # Arabic-Indic three: a decimal digit for \d, as per ID
        ["C000000001", "C000000002"],
        ["1.0"],
        [],
    ],
)
def test_column_checks_match_the_per_id_rules(ids):
    """id_kind / the decimal rule on the joined column agree with the per-ID regexes."""
    from securevfl.data import alignment as al

    kind = "integer" if all(al._INT.match(v) for v in ids) else "text"
    assert al.id_kind(ids) == kind
    decimals = [v for v in ids if not al._INT.match(v) and al._DECIMAL.match(v)]
    refused = bool(decimals) and len(decimals) + sum(bool(al._INT.match(v)) for v in ids) == len(
        ids
    )
    if refused:
        with pytest.raises(ConfigError, match=f"decimal number {decimals[0]!r}"):
            al.check_ids(ids, 0, "f.csv", "cid")
    else:
        al.check_ids(ids, 0, "f.csv", "cid")


def test_read_party_csv_strips_ids_skips_blank_lines_and_names_a_short_row(tmp_path):
    from securevfl.data.alignment import read_party_csv
    from securevfl.errors import DataError

    p = tmp_path / "p.csv"
    p.write_text("v, cid\n1, 7 \n\n2,8\n")
    t = read_party_csv(p, "cid", 0)
    assert t.ids == ["7", "8"] and t.rows == [["1", "7"], ["2", "8"]]  # the ID stripped only
    p.write_text("v,cid\n1,7\n2\n3,9\n")
    with pytest.raises(DataError, match="must have 2 fields per row, got 1 on line 3"):
        read_party_csv(p, "cid", 0)


def test_paused_gc_restores_the_collector_and_nests():
    import gc

    from securevfl.data.alignment import paused_gc

    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause does not re-enable inside the outer one
    assert gc.isenabled()
    with pytest.raises(ValueError), paused_gc():
        raise ValueError("a failing read")
    assert gc.isenabled()


def test_plain_and_quoted_csv_paths_read_and_write_the_same(tmp_path):
    from securevfl.data.alignment import read_party_csv, write_table

    body = "cid,v,w\n7,1.5,a b\r\n007,2,x\n\n-3,3, y \n"
    plain, quoted = tmp_path / "plain.csv", tmp_path / "quoted.csv"
    plain.write_bytes(body.encode())
    quoted.write_bytes(body.replace("a b", '"a b"').encode())  # a quote: the csv module parses
    a, b = read_party_csv(plain, "cid", 0), read_party_csv(quoted, "cid", 0)
    assert a.lines is not None and b.lines is None
    assert a.ids == b.ids == ["7", "007", "-3"] and a.rows == b.rows
    kept = [a.take([2, 0]), b.take([2, 0])]
    for t, name in zip(kept, ("a.csv", "b.csv")):
        write_table(t, tmp_path / name)
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    assert (tmp_path / "a.csv").read_text() == "cid,v,w\n-3,3, y \n7,1.5,a b\n"


def test_integer_ids_sort_by_value_and_ties_keep_the_agreed_order():
    import numpy as np

    from securevfl.data.alignment import _id_order

    ids = ["10", "007", "9", "7", str(2**70), "-1"]
    rows = np.array([3, 0, 1, 4, 2, 5])  # PSI's agreed order of these rows
    got = [ids[i] for i in rows[_id_order(ids, rows, "integer")]]
    assert got == ["-1", "7", "007", "9", "10", str(2**70)]  # Python ints past 64 bits too
    small = np.array([3, 1, 2])
    assert [ids[i] for i in small[_id_order(ids, small, "integer")]] == ["7", "007", "9"]
