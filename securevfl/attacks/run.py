"""Run one attack: train the method with one party's view recorded, attack that view, score it.

Three roles are kept apart. The *run* is an ordinary ``run_experiment`` on the in-process runtime
with a :class:`ViewRecorder` on the attacker's party. The *attacker* gets the recorded view plus
the side knowledge its threat model grants (a few labelled rows; auxiliary rows of the target's
block; a shadow pool from the same distribution), nothing else. The *evaluator* holds the truth
(labels, features, membership) and turns the attacker's guesses into metrics.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score
from threadpoolctl import threadpool_limits

from securevfl.attacks import inversion, label_inference, membership
from securevfl.attacks.views import class_probabilities
from securevfl.context import PartyView, PublicInfo, RunSpec
from securevfl.data import image_shape
from securevfl.errors import ConfigError, check_int, check_open_unit
from securevfl.experiment import build_views, run_experiment, validate_spec
from securevfl.methods.base import Method
from securevfl.registry import lookup, names, register
from securevfl.runtime.inprocess import InProcessRuntime
from securevfl.runtime.view import View, ViewRecorder

N_SAMPLES = 6  # reconstructed images kept in the record (the report's PNG)


@dataclass(frozen=True)
class AttackConfig:
    """Attack knobs: who attacks, whom, with how much side knowledge."""

    attacker: int | None = None  # default: a passive party (labels), the label holder otherwise
    target: int | None = None  # inversion: whose block (default: a data party, not the attacker)
    known_per_class: int = 10  # labelled rows the label attacker holds per class
    score_steps: int = 16  # label scorings: average the first epoch, or this many steps if more
    aux_share: float = 0.1  # inversion: share of training rows whose block the attacker holds
    max_query: int = 500  # membership: members queried (as many non-members)
    decoder_steps: int = inversion.DECODER_STEPS  # inversion: full-batch Adam steps
    seed: int = 0

    def check(self) -> None:
        check_int("known_per_class", self.known_per_class, minimum=1)
        check_int("score_steps", self.score_steps, minimum=1)
        check_open_unit("aux_share", self.aux_share)
        check_int("max_query", self.max_query, minimum=2)
        check_int("decoder_steps", self.decoder_steps, minimum=1)


@dataclass
class Setting:
    """What one attack needs before the run and who plays the attacker."""

    info: PublicInfo  # of the untouched split
    truth: dict[int, PartyView]  # every party's block, labels at the label holder (evaluator)
    cfg: AttackConfig
    spec: RunSpec
    attacker: int = 0
    hook: Any = None
    side: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def y(self) -> np.ndarray:
        return self.truth[self.info.label_party].y_train


@dataclass(frozen=True)
class Attack:
    name: str
    role: str  # "passive" or "label"
    prepare: Callable[[Setting], None]
    score: Callable[[Setting, View], dict[str, Any]]
    binary_only: bool = False


def _passive(info: PublicInfo) -> int:
    return 1 if info.label_party != 1 else 0


def _known_labels(s: Setting) -> None:
    rng = np.random.default_rng(s.cfg.seed)
    known = {}
    for c in np.unique(s.y):
        rows = np.flatnonzero(s.y == c)
        for r in rng.choice(rows, size=min(s.cfg.known_per_class, len(rows)), replace=False):
            known[int(r)] = int(c)
    s.side["known"] = known


def _rare_class(y: np.ndarray) -> int:
    vals, counts = np.unique(y, return_counts=True)
    return int(vals[np.argmin(counts)])


def _label_scoring(kind: str) -> Callable[[Setting, View], dict[str, Any]]:
    def score(s: Setting, view: View) -> dict[str, Any]:
        rare = _rare_class(s.y)
        known = s.side["known"]
        L = s.info.label_party
        if kind == "norm":
            scored = label_inference.norm_scores(view, label_party=L)
        elif kind == "aggregate":
            scored = label_inference.aggregate_scores(view, known=known, rare=rare)
        else:
            known_rare = {r for r, c in known.items() if c == rare}
            scored = label_inference.direction_scores(view, label_party=L, known_rare=known_rare)
        out = label_inference.leak_auc(
            scored, s.y == rare, exclude=set(known), steps=s.cfg.score_steps
        )
        return {**out, "rare_class": rare}

    return score


def _completion(s: Setting, view: View) -> dict[str, Any]:
    known, seed = s.side["known"], s.cfg.seed
    rows, pred = label_inference.model_completion(view, known, seed=seed)
    # the same classifier on the party's raw columns: what its data alone give, without training
    _, raw = label_inference.model_completion(view, known, seed=seed, use_model=False)
    y = s.y[rows]
    majority = float(np.max(np.unique(y, return_counts=True)[1]) / len(y))
    return {
        "accuracy": float(np.mean(pred == y)),
        "accuracy_raw_features": float(np.mean(raw == y)),
        "chance": majority,
        "rows": len(rows),
    }


def _prepare_inversion(s: Setting) -> None:
    target = s.cfg.target if s.cfg.target is not None else _passive(s.info)
    if not 0 <= target < s.info.data_parties or target == s.attacker:
        raise ConfigError(
            f"target must be a data party other than the attacker {s.attacker} "
            f"(0..{s.info.data_parties - 1}), got {target}"
        )
    X = s.truth[target].X_train
    rng = np.random.default_rng(s.cfg.seed)
    rows = rng.choice(len(X), size=max(2, round(s.cfg.aux_share * len(X))), replace=False)
    s.side.update(target=target, aux={int(r): X[r] for r in rows})


def _image_shape(s: Setting, target: int) -> tuple[int, int] | None:
    shape = image_shape(s.info.dataset)
    w = None if shape is None else shape[1]
    cols = np.asarray(s.truth[target].columns)
    if w is None or len(cols) % w or cols[0] % w or np.any(np.diff(cols) != 1):
        return None
    return len(cols) // w, w


def _inversion(s: Setting, view: View) -> dict[str, Any]:
    target, aux = s.side["target"], s.side["aux"]
    rows, rec = inversion.invert(
        view, target=target, aux=aux, seed=s.cfg.seed, steps=s.cfg.decoder_steps
    )
    if not rows.size:
        return {"target": target, "rows": 0, "mse_ratio": 1.0}
    X = s.truth[target].X_train[rows]
    mean = np.mean(list(aux.values()), axis=0)
    mse = float(np.mean((rec - X) ** 2))
    base = float(np.mean((mean - X) ** 2))
    out: dict[str, Any] = {
        "target": target,
        "rows": len(rows),
        "aux_rows": len(aux),
        "mse": mse,
        "mse_mean_baseline": base,
        "mse_ratio": mse / base if base > 0 else 1.0,
    }
    shape = _image_shape(s, target)
    if shape is not None:
        out["ssim"] = inversion.ssim(X, rec, shape)
        out["ssim_mean_baseline"] = inversion.ssim(X, np.tile(mean, (len(X), 1)), shape)
        k = min(N_SAMPLES, len(rows))
        out["samples"] = {
            "shape": list(shape),
            "original": np.round(X[:k], 4).tolist(),
            "reconstructed": np.round(rec[:k], 4).tolist(),
        }
    return out


def _prepare_membership(s: Setting) -> None:
    """Target trains on half the training split; the other half is the attacker's shadow pool;
    the test split the method scores is m members beside m held-out non-members."""
    if s.info.task == "regression":
        raise ConfigError("membership attacks need a classification task, got regression")
    rng = np.random.default_rng(s.cfg.seed)
    perm = rng.permutation(s.info.n_train)
    target_rows, pool = np.sort(perm[: len(perm) // 2]), np.sort(perm[len(perm) // 2 :])
    m = min(s.cfg.max_query, len(target_rows), s.info.n_test)
    members = np.sort(rng.choice(len(target_rows), size=m, replace=False))  # positions in T
    outsiders = np.sort(rng.choice(s.info.n_test, size=m, replace=False))

    def hook(info: PublicInfo, views: dict[int, PartyView], pooled: Any):
        new = {}
        for k, v in views.items():
            new[k] = dataclasses.replace(
                v,
                X_train=v.X_train[target_rows],
                X_test=np.vstack([v.X_train[target_rows][members], v.X_test[outsiders]]),
            )
            if v.y_train is not None:
                new[k].y_train = v.y_train[target_rows]
                new[k].y_test = np.concatenate([new[k].y_train[members], v.y_test[outsiders]])

        def pooled2():
            Xtr, ytr, Xte, yte = pooled()
            Xq = np.vstack([Xtr[target_rows][members], Xte[outsiders]])
            return (
                Xtr[target_rows],
                ytr[target_rows],
                Xq,
                np.concatenate([ytr[target_rows][members], yte[outsiders]]),
            )

        info2 = dataclasses.replace(info, n_train=len(target_rows), n_test=2 * m)
        return info2, new, pooled2

    L = s.info.label_party
    X_pool = np.hstack([s.truth[k].X_train[pool] for k in range(s.info.data_parties)])
    y_q = np.concatenate([s.y[target_rows][members], s.truth[L].y_test[outsiders]])
    s.hook = hook
    s.side.update(pool=(X_pool, s.y[pool]), y_query=y_q, m=m, member=np.repeat([1, 0], m))


def _membership(kind: str) -> Callable[[Setting, View], dict[str, Any]]:
    def score(s: Setting, view: View) -> dict[str, Any]:
        C = int(s.info.n_classes or 2)
        probs = class_probabilities(view.outputs, C)
        y, member = s.side["y_query"], s.side["member"]
        if kind == "shadow":
            sp = s.spec
            lr = sp.lr if sp.lr is not None else 0.01

            def make(seed: int):
                return membership.shadow_model(
                    sp.model,
                    epochs=sp.epochs,
                    batch_size=sp.batch_size,
                    hidden=sp.hidden,
                    lr=lr,
                    seed=seed,
                )

            X_pool, y_pool = s.side["pool"]
            attack = membership.train_attack(X_pool, y_pool, C, make_shadow=make, seed=s.cfg.seed)
            scores = membership.shadow_scores(attack, probs, y)
            guess = scores >= 0.5
        else:
            scores = membership.loss_scores(probs, y)
            guess = scores >= np.median(scores)
        outside = member == 0
        return {
            "accuracy": float(np.mean(guess == (member == 1))),
            "auc": float(roc_auc_score(member, scores)),
            "members": int(s.side["m"]),
            "non_members": int(s.side["m"]),
            "target_accuracy_non_members": float(np.mean(probs[outside].argmax(1) == y[outside])),
            "target_accuracy_members": float(np.mean(probs[~outside].argmax(1) == y[~outside])),
        }

    return score


for _a in (
    Attack("label-norm", "passive", _known_labels, _label_scoring("norm"), binary_only=True),
    Attack("label-direction", "passive", _known_labels, _label_scoring("dir"), binary_only=True),
    Attack(
        "label-aggregate", "passive", _known_labels, _label_scoring("aggregate"), binary_only=True
    ),
    Attack("model-completion", "passive", _known_labels, _completion),
    Attack("inversion", "label", _prepare_inversion, _inversion),
    Attack("membership", "label", _prepare_membership, _membership("shadow")),
    Attack("membership-loss", "label", _prepare_membership, _membership("loss")),
):
    register("attack", _a.name, _a)


def split_metrics(found: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``metrics``: the finite numbers (what a bench report may aggregate); ``details``: the
    rest (image samples, per-epoch curves, where the scored values came from)."""
    num = {
        k: v
        for k, v in found.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)
    }
    return {"metrics": num, "details": {k: v for k, v in found.items() if k not in num}}


def attack_names() -> list[str]:
    return names("attack")


def _setting(attack: Attack, spec: RunSpec, method: Method, cfg: AttackConfig) -> Setting:
    n = method.n_parties(spec)
    info, truth, _ = build_views(spec, method, list(range(n)))
    if attack.binary_only and info.task != "binary":
        raise ConfigError(
            f"attack {attack.name!r} needs a binary task, got {info.task} dataset {info.dataset!r}"
        )
    s = Setting(info=info, truth=truth, cfg=cfg, spec=spec)
    s.attacker = _passive(info) if attack.role == "passive" else info.label_party
    if cfg.attacker is not None:
        s.attacker = cfg.attacker
    if not 0 <= s.attacker < n:
        raise ConfigError(f"attacker must be a party index in [0, {n}), got {s.attacker}")
    if attack.role == "passive" and s.attacker == info.label_party:
        raise ConfigError(
            f"attacker for {attack.name!r} must not hold the labels, got {s.attacker}"
        )
    attack.prepare(s)
    return s


def run_attack(name: str, spec: RunSpec, cfg: AttackConfig | None = None) -> dict[str, Any]:
    """Train ``spec`` with the attacker's view recorded and return the attack record."""
    # a suite's seeds vary the run; the attack's side knowledge (known rows, aux rows) with it
    cfg = cfg or AttackConfig(seed=spec.seed if spec.seed is not None else 0)
    cfg.check()
    attack: Attack = lookup("attack", name)
    method = validate_spec(spec)
    t0 = time.perf_counter()
    s = _setting(attack, spec, method, cfg)
    rt = InProcessRuntime(method.n_parties(spec))
    rt.view = ViewRecorder(s.attacker)
    try:
        record = run_experiment(spec, rt, views_hook=s.hook)
    finally:
        rt.close()
    t1 = time.perf_counter()
    # one BLAS thread, like the run's one torch thread: shadow models on 2 loaded cores ran 27x
    # slower with the default thread pool (86.7 s vs 3.2 s, one fashion-mnist shadow MLP)
    with threadpool_limits(1):
        metrics = attack.score(s, rt.view.view)
    priv = record.get("privacy") or {}
    return {
        "attack": name,
        "method": spec.method,
        "dataset": spec.dataset,
        "attacker": s.attacker,
        **split_metrics(metrics),
        "epsilon": priv.get("epsilon"),
        "privacy_unit": priv.get("unit"),
        "target_epsilon": spec.epsilon,
        "attack_config": dataclasses.asdict(cfg),
        "time": {"run_s": round(t1 - t0, 3), "attack_s": round(time.perf_counter() - t1, 3)},
        "run": record,
    }
