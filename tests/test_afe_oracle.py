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
