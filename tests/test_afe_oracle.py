"""The perfect-bottom oracle of VFL-AFE (bench.afe_oracle): it spans holder-alone to pooled."""

from bench.afe_oracle import perfect_bottom_accuracy


def test_oracle_goes_from_the_label_holder_alone_to_the_noiseless_release():
    r = perfect_bottom_accuracy("breast", 3, active_features=True, epsilons=[1e-3, 1e4], draws=2)
    tiny, huge = r["by_epsilon"][1e-3][0], r["by_epsilon"][1e4][0]
    # noise far wider than the ball: the releases are worthless, the holder's columns remain
    assert abs(tiny - r["holder_alone"]) <= 3.0
    # noise far narrower: the oracle is the noiseless perfect release
    assert abs(huge - r["noiseless"]) <= 1.0
    # and without features of its own the holder is at the majority class under heavy noise
    p = perfect_bottom_accuracy("breast", 2, active_features=False, epsilons=[1e-3], draws=2)
    assert abs(p["by_epsilon"][1e-3][0] - p["majority"]) <= 5.0 and p["holder_alone"] is None


def test_afe_report_puts_the_oracle_beside_each_binary_setting(tmp_path):
    from bench.reports import afe as report
    from securevfl.context import RunSpec
    from securevfl.experiment import run_experiment

    recs = []
    for parties, active in ((2, False), (3, True)):
        for variant in ("vanilla", "full"):
            spec = RunSpec(
                method="afe-vfl", dataset="breast", parties=parties, model="mlp", epochs=1,
                batch_size=64, seed=0, epsilon=4.0, delta=1e-5, aggregation="concat",
                options={"variant": variant, "active_features": active},
            )  # fmt: skip
            recs.append(run_experiment(spec))
    md = report.render(recs, tmp_path)
    rows = [
        line for line in md.splitlines() if line.startswith("| breast |") and "passive |" in line
    ]
    assert len(rows) == 2 and all("(without passive: " in r for r in rows)
    assert len(list(tmp_path.glob("afe_breast_*.png"))) == 2
