"""VFL-AFE: sensitivity of what is released (rescaling included), FCM, the local losses, ε."""

import numpy as np
import pytest
import torch

from securevfl.context import RunSpec
from securevfl.errors import ConfigError
from securevfl.experiment import run_experiment
from securevfl.methods.afe_hooks import block_scale
from securevfl.models.afe_losses import (
    contrastive_loss,
    kl_gaussian_distances,
    paired_contrastive_loss,
)
from securevfl.privacy.afe import (
    CLIPS,
    RescaleState,
    batch_stats,
    clip_rows,
    mean_sq_distance,
    noisy_stats,
    pairings,
    plan_noise,
    released_rows,
    rescale,
    stats_sensitivity,
)
from securevfl.training.fcm import fuzzy_cmeans, pseudo_labels


def _neighbours(rng, b, d, C):
    """A batch and a neighbour differing in one row; rows of varied scale, some far outside C."""
    h = rng.normal(size=(b, d)) * rng.choice([0.01, 0.3, 3.0], size=(b, 1))
    h2 = h.copy()
    i = int(rng.integers(b))
    h2[i] = rng.normal(size=d) * rng.choice([0.01, 1.0, 10.0])
    return h, h2, i


def test_release_moves_by_at_most_the_accounted_sensitivities():
    rng = np.random.default_rng(0)
    C = 0.7
    for trial in range(200):
        b, d = int(rng.integers(2, 40)), int(rng.integers(1, 9))
        h, h2, i = _neighbours(rng, b, d, C)
        perms = pairings(b, seed=trial)
        u = clip_rows(torch.as_tensor(h), C)
        u2 = clip_rows(torch.as_tensor(h2), C)
        # the statistics release: Δ_w = √21 / b (unit-ball units)
        w, w2 = batch_stats(u.numpy() / C, perms), batch_stats(u2.numpy() / C, perms)
        assert np.linalg.norm(w - w2) <= stats_sensitivity(b) * (1 + 1e-9)
        # given the (noisy, released) statistics, the embedding release: Δ = 2C, one row only
        st = RescaleState(d, confidence=0.999)
        st.update(w + rng.normal(0, 0.05, size=w.shape), b=b, sigma=0.05)
        centre = torch.as_tensor(st.centre * C)
        r = rescale(u, centre=centre, factor=st.factor, bound=C).numpy()
        r2 = rescale(u2, centre=centre, factor=st.factor, bound=C).numpy()
        assert np.linalg.norm(r - r2) <= 2 * C * (1 + 1e-9)
        assert np.all(r[np.arange(b) != i] == r2[np.arange(b) != i])
        assert np.all(np.linalg.norm(r, axis=1) <= C * (1 + 1e-6))


def test_a_factor_from_the_current_batch_would_break_the_bound():
    """The paper's factor, from the batch's own rows: one changed row moves every row."""
    C, b = 1.0, 16
    h = np.zeros((b, 2))
    h[:, 0] = np.linspace(-0.05, 0.05, b)
    h2 = h.copy()
    h2[0] = [-1.0, 0.0]  # one row far out: the batch's spread grows, its factor shrinks

    def paper(x):
        u = clip_rows(torch.as_tensor(x), C)
        spread = torch.cdist(u, u).max()
        return rescale(u, centre=u.mean(0), factor=float(2 * C / spread), bound=C).numpy()

    assert np.linalg.norm(paper(h) - paper(h2)) > 2 * C


def test_distance_statistics_match_all_pairs():
    rng = np.random.default_rng(1)
    v = rng.normal(size=(50, 6))
    v /= np.maximum(1, np.linalg.norm(v, axis=1, keepdims=True))
    dist = np.linalg.norm(v[:, None] - v[None], axis=2)
    off = ~np.eye(50, dtype=bool)
    w = batch_stats(v, pairings(50, seed=0, count=200))
    assert mean_sq_distance(w, b=50, sigma=0.0) == pytest.approx((dist[off] ** 2).mean())
    assert w[-1] == pytest.approx(dist[off].mean())  # 49 shifts: every pair, once each way
    # noise correction: unbiased over the Gaussian release
    ests = [
        mean_sq_distance(noisy_stats(v, np.zeros((1, 50), int), z=5.0, rng=rng)[0], b=50,
                         sigma=5.0 * stats_sensitivity(50))
        for _ in range(3000)
    ]  # fmt: skip
    assert np.mean(ests) == pytest.approx((dist[off] ** 2).mean(), rel=0.05)


def test_fcm_recovers_planted_clusters():
    rng = np.random.default_rng(2)
    centres = np.array([[0, 0, 5.0], [5.0, 0, 0], [0, 5.0, 0]]) * 1e-3  # gradients are small
    truth = np.repeat(np.arange(3), 40)
    x = centres[truth] + rng.normal(0, 1e-3, size=(120, 3))
    u, _ = fuzzy_cmeans(x, 3)
    pred = u.argmax(axis=1)
    # same partition up to relabelling
    agree = sum(np.bincount(pred[truth == c]).max() for c in range(3))
    assert agree / 120 >= 0.95
    labels, keep = pseudo_labels(x, 3, threshold=0.8)
    assert 0.3 < keep.mean() < 1.0 + 1e-9
    purity = sum(np.bincount(labels[keep & (truth == c)], minlength=3).max() for c in range(3))
    assert purity == keep.sum()


def test_contrastive_loss_decreases_on_separable_data():
    rng = np.random.default_rng(3)
    labels = torch.as_tensor(np.repeat([0, 1], 20))
    keep = torch.ones(40, dtype=torch.bool)
    z = torch.nn.Parameter(torch.as_tensor(rng.normal(0, 0.3, size=(40, 4)), dtype=torch.float32))
    opt = torch.optim.Adam([z], lr=0.1)
    first = None
    for _ in range(30):
        loss = contrastive_loss(clip_rows(z, 1.0), labels, keep, bound=1.0)
        first = float(loss.detach()) if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 0.3 * first
    # and it prefers separated classes to mixed ones
    sep = torch.cat([torch.full((20, 4), 0.4), torch.full((20, 4), -0.4)])
    mixed = sep[torch.randperm(40, generator=torch.Generator().manual_seed(0))]
    assert contrastive_loss(sep, labels, keep, bound=1.0) < contrastive_loss(
        mixed, labels, keep, bound=1.0
    )


def test_kl_term_is_small_for_gaussian_distances_and_large_for_bimodal():
    rng = np.random.default_rng(4)
    perms = torch.as_tensor(pairings(400, seed=0))
    gauss = torch.as_tensor(rng.normal(size=(400, 32)) * 0.1)
    two = torch.as_tensor(np.repeat([[0.5] * 4, [-0.5] * 4], 200, axis=0)) + 0.01 * torch.as_tensor(
        rng.normal(size=(400, 4))
    )
    assert float(kl_gaussian_distances(gauss, perms)) < 0.02
    assert float(kl_gaussian_distances(two, perms)) > 0.06  # ~ (-2)² / 48


def _spec(**kw):
    base = dict(
        method="afe-vfl", dataset="breast", parties=2, model="mlp", epochs=2, batch_size=64,
        seed=5, epsilon=4.0, delta=1e-5,
    )  # fmt: skip
    base.update(kw)
    # these tests cover the seed's split schedule (release-once: tests/test_release_once.py)
    base["options"] = {"release_schedule": "split", **(base.get("options") or {})}
    return RunSpec(**base)


@pytest.mark.parametrize("variant, bottom", [("vanilla", "exact"), ("full", "exact"),
                                             ("vanilla", "dp"), ("full", "dp")])  # fmt: skip
def test_achieved_epsilon_meets_the_target_within_two_percent(variant, bottom):
    rec = run_experiment(_spec(options={"variant": variant, "bottom": bottom}))
    p = rec["privacy"]
    assert p["unit"] == "party-row" and p["target_epsilon"] == 4.0
    assert 0.98 * 4.0 <= p["epsilon"] <= 4.0
    n_train, n_test = rec["n_train"], rec["n_test"]
    if bottom == "dp":  # a training row's own: 2 embeddings, 2 bottom updates (+2 statistics)
        releases = 4 + (2 if variant == "full" else 0)
    else:  # every release of a party's rows counts: 2 epochs of all training rows, the test
        # rows, and (full) every batch's statistics
        releases = 2 * n_train + n_test + (2 * -(-n_train // 64) if variant == "full" else 0)
    assert {v["releases"] for v in p["per_party"].values()} == {releases}
    assert set(p["per_party"]) == {"0", "1"}
    assert rec["stats"]["step_ms"]["total"] > 0


def test_plan_noise_is_monotone_and_spends_the_share():
    kw = dict(delta=1e-5, epochs=5, rescaling=True, share=0.2, rows=(100, 20), batches=4)
    z1, s1, e1 = plan_noise(epsilon=1.0, **kw)
    z2, _, _ = plan_noise(epsilon=2.0, **kw)
    assert z2 < z1 and e1 <= 1.0
    mu_sq = (5 * 100 + 20) / z1**2 + 5 * 4 / s1**2  # every embedding and statistics release
    assert 5 * 4 / s1**2 / mu_sq == pytest.approx(0.2)


@pytest.mark.parametrize(
    "opts, match",
    [
        ({"variant": "x"}, "variant"),
        ({"clip": 0}, "clip"),
        ({"fcm_threshold": 1.5}, "fcm_threshold"),
        ({"confidence": 0.4}, "confidence"),
        ({"stats_share": 1}, "stats_share"),
        ({"lam_kl": -1, "bottom": "exact"}, "lam_kl"),
        ({"kl_every": 0, "bottom": "exact"}, "kl_every"),
        ({"lam_kl": 0.1}, "lam-kl"),  # the KL term couples rows: exact bottoms only
        ({"grad_clip": 0}, "grad_clip"),
        ({"grad_share": 1}, "grad_share"),
        ({"bottom": "x"}, "bottom"),
    ],
)
def test_bad_options_are_refused(opts, match):
    with pytest.raises(ConfigError, match=match):
        run_experiment(_spec(options=opts))


def test_one_passive_party_is_refused():
    with pytest.raises(ConfigError, match="parties"):
        run_experiment(_spec(parties=1))


@pytest.mark.networked
@pytest.mark.slow
@pytest.mark.parametrize(
    "parties, options, parts",
    [
        (2, {"variant": "full"}, {"0", "1", "top"}),
        (3, {"variant": "full", "active_features": True, "head_epochs": 1}, {"0", "1", "2", "top"}),
    ],
)
def test_afe_is_identical_in_both_runtimes(parties, options, parts):
    from bench.runner import PLUGINS
    from securevfl.experiment import run_in_processes

    spec = _spec(epochs=1, timeout=60, parties=parties, options=options, reproducible_noise=True)
    net = run_in_processes(spec, plugins=PLUGINS)
    local = run_experiment(spec)
    assert net["runtime"] == "processes"
    assert net["model_fingerprint"] == local["model_fingerprint"]
    assert set(net["model_fingerprint"]) == parts
    assert net["comm"]["bytes_total"] == local["comm"]["bytes_total"] > 0
    # the reproduction mode prints no ε; the releases counted are the same
    assert net["privacy"]["per_party"] == local["privacy"]["per_party"]


def test_pairings_have_no_self_pairs_and_cover_each_row_equally():
    for b in (2, 3, 10, 257):
        p = pairings(b, seed=b)
        assert np.all(p != np.arange(b))
        counts = np.bincount(p.ravel(), minlength=b) + len(p)  # as partner + as first
        assert np.all(counts == 2 * len(p))


def test_active_features_accounts_only_the_passive_parties():
    rec = run_experiment(_spec(parties=3, options={"variant": "vanilla", "active_features": True}))
    p = rec["privacy"]
    assert set(p["per_party"]) == {"1", "2"}  # party 0 is the label holder: nothing released
    assert 0.98 * 4.0 <= p["epsilon"] <= 4.0
    assert rec["extra"]["accuracy_ceiling"] is None  # its own columns are not released
    with pytest.raises(ConfigError, match="parties"):  # the split variants contrast >= 2
        run_experiment(_spec(parties=2, options={"variant": "full", "active_features": True}))


def test_passive_only_run_reports_its_ceiling_and_head_epochs_change_only_the_head():
    # the reproduction mode (same noise in both runs; no ε printed, the releases still counted)
    a = run_experiment(_spec(epochs=1, options={"variant": "vanilla"}, reproducible_noise=True))
    b = run_experiment(
        _spec(epochs=1, options={"variant": "vanilla", "head_epochs": 2}, reproducible_noise=True)
    )
    assert 0.5 <= a["extra"]["accuracy_ceiling"] <= 1.0
    assert a["privacy"]["per_party"] == b["privacy"]["per_party"]  # post-processing: no event
    assert a["comm"]["bytes_total"] == b["comm"]["bytes_total"]
    fa, fb = a["model_fingerprint"], b["model_fingerprint"]
    assert fa["0"] == fb["0"] and fa["1"] == fb["1"] and fa["top"] != fb["top"]


def test_soft_clip_stays_in_the_ball_and_keeps_a_radial_gradient():
    rng = np.random.default_rng(3)
    C = 0.5
    h = torch.as_tensor(rng.normal(size=(50, 2)) * rng.choice([0.01, 1.0, 30.0], size=(50, 1)))
    for mode in ("soft", "hard"):
        assert torch.all(CLIPS[mode](h, C).norm(dim=1) <= C * (1 + 1e-9))  # rows <= 2C apart
    # rows 1.2C-3C long: the hard clip leaves them no gradient along themselves, soft does
    u = rng.normal(size=(50, 2))
    far = u / np.linalg.norm(u, axis=1, keepdims=True) * rng.uniform(1.2 * C, 3 * C, size=(50, 1))
    x = torch.tensor(far, requires_grad=True)
    for mode, radial in (("soft", True), ("hard", False)):
        (g,) = torch.autograd.grad(CLIPS[mode](x, C).norm(dim=1).sum(), x)
        assert bool((g.norm(dim=1) > 1e-3).all()) == radial


def test_identity_rescale_gradient_sends_the_rescaled_value_with_the_clipped_rows_gradient():
    rng = np.random.default_rng(4)
    h = torch.tensor(rng.normal(0.3, 0.02, size=(30, 1)), requires_grad=True)
    g = torch.as_tensor(rng.normal(size=(30, 1)))
    u = clip_rows(h, 1.0)
    outs = {}
    for mode in ("identity", "chain"):
        out = released_rows(u, factor=15.0, bound=1.0, clip="hard", gradient=mode)
        (grad,) = torch.autograd.grad((out * g).sum(), h, retain_graph=True)
        outs[mode] = (out.detach(), grad)
    want = rescale(u, factor=15.0, bound=1.0).detach()
    assert torch.equal(outs["identity"][0], want) and torch.equal(outs["chain"][0], want)
    (plain,) = torch.autograd.grad((u * g).sum(), h)
    assert torch.allclose(outs["identity"][1], plain)  # the bottom learns as vanilla's would
    # d = 1 (adult): through the factor every row is pushed out of the ball, no gradient left
    assert float(outs["chain"][1].norm()) < 1e-3 * float(plain.norm())


def test_block_scale_divides_only_the_passive_blocks():
    s = block_scale(6, dim=2, passive=[1, 2], spread=4.0, summed=False, holder_sends=True)
    assert s.tolist() == [1, 1, 0.25, 0.25, 0.25, 0.25]
    s = block_scale(4, dim=2, passive=[0, 1], spread=4.0, summed=False, holder_sends=False)
    assert s.tolist() == [0.25] * 4
    assert block_scale(
        2, dim=2, passive=[1], spread=4.0, summed=True, holder_sends=True
    ).tolist() == [1, 1]


def test_paired_contrastive_row_gradient_ignores_the_other_rows_and_separates_classes():
    rng = np.random.default_rng(5)
    b, d = 24, 3
    perms = torch.as_tensor(pairings(b, seed=1))
    labels = torch.as_tensor(np.repeat([0, 1], b // 2))
    keep = torch.ones(b, dtype=torch.bool)
    partners = torch.as_tensor(rng.normal(size=(b, d)))
    z = torch.tensor(rng.normal(0, 0.3, size=(b, d)), requires_grad=True)
    z2 = z.detach().clone()
    z2[5] += 1.0  # another row changes: row 0's gradient must not
    grads = []
    for x in (z, z2.requires_grad_(True)):
        loss = paired_contrastive_loss(x, labels, keep, bound=1.0, partners=partners, perms=perms)
        grads.append(torch.autograd.grad(loss, x)[0])
    assert torch.equal(grads[0][0], grads[1][0])
    # against noisy released copies of separated classes the loss prefers the separation
    sep = torch.cat([torch.full((b // 2, d), 0.4), torch.full((b // 2, d), -0.4)]).double()
    noisy = sep + torch.as_tensor(rng.normal(0, 0.3, size=(b, d)))
    mixed = sep[torch.randperm(b, generator=torch.Generator().manual_seed(0))]
    kw = {"bound": 1.0, "partners": noisy, "perms": perms}
    assert paired_contrastive_loss(sep, labels, keep, **kw) < paired_contrastive_loss(
        mixed, labels, keep, **kw
    )
