"""The scale report: per-party peak memory, growth ratios per 10x rows and per 2x parties."""

from bench.reports.scale import render
from bench.suites import load_suite


def _rec(method, k, n, train_s, nbytes, peak_mib, start_mib=None):
    stats = {"peak_rss_bytes": {str(i): peak_mib * 2**20 for i in range(k)}}
    if start_mib is not None:
        stats["start_rss_bytes"] = {str(i): start_mib * 2**20 for i in range(k)}
    return {
        "method": method,
        "parties": k,
        "n_train": int(n * 0.8),
        "n_test": n - int(n * 0.8),
        "runtime": "processes",
        "time": {"train_s": train_s},
        "comm": {"bytes_total": nbytes},
        "stats": stats,
    }


def test_growth_ratios_and_plots(tmp_path):
    recs = [
        _rec("vfl", 2, 10_000, 1.0, 1_000_000, 300, 290),
        _rec("vfl", 2, 100_000, 8.0, 10_000_000, 450, 290),
        _rec("vfl", 4, 10_000, 2.0, 3_000_000, 310),
        _rec("vfl", 2, 10_000, 1.0, 1_000_000, 300) | {"runtime": "inprocess"},  # not counted
    ]
    md = render(recs, tmp_path)
    # peak above start: 10 MiB -> 160 MiB (imports excluded)
    assert "| vfl | K=2: n 10,000 -> 100,000 | 8.00x | 10.00x | 1.50x | 16.00x |" in md
    assert "| vfl | n=10,000: K 2 -> 4 | 2.00x | 3.00x | 1.03x | n/a |" in md
    assert "| vfl | 2 | 10,000 | 1 | 1 | 300-300 | 10 | 1 |" in md
    assert (tmp_path / "scale_by_n.png").stat().st_size > 0
    assert (tmp_path / "scale_by_K.png").stat().st_size > 0


def test_scale_suites_load():
    small, big = load_suite("scale"), load_suite("scale-1m")
    assert all(c.processes for c in small.cells + big.cells)
    sizes = {(c.spec.parties, c.spec.dataset_options["n"]) for c in big.cells}
    assert (2, 1_000_000) in sizes and (16, 100_000) in sizes
    assert max(c.spec.dataset_options["n"] for c in small.cells) == 100_000


def test_party_growth_against_its_columns(tmp_path):
    r = _rec("vfl", 2, 100_000, 1.0, 1, 400, 300) | {"features_per_party": [20, 20]}
    r["stats"]["peak_rss_bytes"]["1"] = 500 * 2**20  # party 1 grew 200 MiB
    md = render([r], tmp_path)
    # party 1's columns: 100,000 x 20 float64 = 15 MiB; the table 31 MiB
    assert "| vfl | 2 | 100,000 | 1 | 200 | 15 | 31 | 13.11 | 6.55 |" in md
