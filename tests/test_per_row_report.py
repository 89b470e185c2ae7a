"""The per-row-release report section (bench/reports/per_row.py): every per-row method beside
its ceiling, the perfect-bottom oracle and its floor."""

from securevfl.context import RunSpec
from securevfl.experiment import run_experiment


def _spec(method, parties, epsilon=None, **options):
    return RunSpec(
        method=method, dataset="breast", parties=parties, model="mlp", epochs=3, batch_size=128,
        embedding_dim=1, seed=0, epsilon=epsilon, delta=1e-5 if epsilon else None,
        options=options,
    )  # fmt: skip


def test_per_row_section_shows_ceiling_oracle_and_the_right_floor(tmp_path):
    from bench.reports import per_row

    recs = [
        run_experiment(_spec("ldp-vfl", 2, 8.0, bottom_epochs=2)),
        run_experiment(_spec("vafl-dp", 3, 8.0, bottom_epochs=2, active_features=True)),
        run_experiment(_spec("local", 3)),
    ]
    md = per_row.render(recs, tmp_path)
    rows = {line.split(" | ")[2]: line for line in md.splitlines() if line.startswith("| breast")}
    assert set(rows) == {"ldp-vfl", "vafl-dp"}
    ldp, vafl = rows["ldp-vfl"].split(" | "), rows["vafl-dp"].split(" | ")
    # the seeds' setting: a proven ceiling, an oracle, the majority class as its floor
    ceiling = float(ldp[6].split(" ± ")[0])
    assert (
        recs[0]["extra"]["accuracy_ceiling"] == ceiling
        or abs(recs[0]["extra"]["accuracy_ceiling"] - ceiling) < 1e-3
    )
    assert 0.5 < float(ldp[7]) <= 1.0 and ldp[8].startswith("majority class")
    # the label holder with columns: no ceiling, the label holder alone (local, K = 3) as floor
    alone = recs[2]["metrics"]["accuracy"]
    assert vafl[6] == "—" and vafl[8] == f"label holder alone {alone:.3f}"
    assert len(list(tmp_path.glob("per_row_breast_*.png"))) == 2


def test_per_row_section_is_empty_without_per_row_runs(tmp_path):
    from bench.reports import per_row

    assert per_row.render([run_experiment(_spec("local", 2))], tmp_path) == ""


def test_the_split_schedule_is_a_setting_of_its_own(tmp_path):
    from bench.reports import per_row

    recs = [
        run_experiment(_spec("ldp-vfl", 2, 8.0, bottom_epochs=2)),
        run_experiment(_spec("ldp-vfl", 2, 8.0, release_schedule="split")),
    ]
    md = per_row.render(recs, tmp_path)
    rows = [line.split(" | ")[1] for line in md.splitlines() if line.startswith("| breast")]
    assert sorted(rows) == ["2 passive", "2 passive, split schedule"]
