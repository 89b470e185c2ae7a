"""HE-VFL: Taylor-approximated logistic regression under homomorphic encryption.

The comparator of HDP-VFL's Section 6.1 (method 4), in the style of Hardy et al. (2017) and
FATE's hetero logistic regression, with K >= 2 data parties (party 0 holds the labels) and a
coordinator C = party K that holds the secret key.

Loss: the second-order Taylor expansion of log(1 + exp(-y t)) around t = 0,
``l(t) = log 2 - y t / 2 + t^2 / 8`` (y in {-1, +1}), so ``dl/dt = t/4 - y/2`` is *linear* in the
encrypted intermediate results and needs no ciphertext-ciphertext product. We send the scaled
residual ``4 dl/dt = t - 2y`` and divide by 4 after decryption (one plaintext multiplication in
total, depth 1).

Per minibatch (SPMD):
  1. each passive party k encrypts u_k = X_k w_k and sends [[u_k]] to party 0;
  2. party 0 forms [[4d]] = sum_k [[u_k]] + (X_0 w_0 + b - 2y) and sends it to every passive party;
  3. every data party k computes [[X_k^T 4d + R_k]] with a mask R_k only it knows (party 0 also
     for its bias, through a column of ones) and sends it to C;
  4. C decrypts (CKKS: and sums the masked slot blocks) and returns the masked vector to k alone;
  5. k subtracts its mask, divides by 4b, takes a gradient step. C never sees a plain gradient,
     data parties never see a residual or another party's IR.
Scores are computed by the shared GLM predictor (plain IRs to party 0, metered as 'eval').
"""

from __future__ import annotations

import time

import numpy as np

from baselines.he_schemes import SCHEMES, parse_coeff_bits
from protocols import ckks_he as ck
from protocols import paillier_he as ph
from securevfl.context import Option, RunContext, fingerprint
from securevfl.errors import ConfigError
from securevfl.methods.base import Method, register_method
from securevfl.models.glm import make_loss, make_penalty
from securevfl.results import FitResult
from securevfl.training import GLMState, glm_fingerprints, minibatches, n_batches, predict_glm
from securevfl.training.glm_trainer import DEFAULT_GLM_LR


def taylor_loss(theta: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log 2 - y theta / 2 + theta^2 / 8, y in {-1, +1}."""
    return np.log(2.0) - 0.5 * y * theta + 0.125 * theta**2


def taylor_derivative(theta: np.ndarray, y: np.ndarray) -> np.ndarray:
    """d/dtheta of :func:`taylor_loss`: theta / 4 - y / 2."""
    return 0.25 * theta - 0.5 * y


CKKS_ONLY = ("scheme", ("ckks",))  # option applies only to CKKS runs


@register_method
class HEVFL(Method):
    name = "he-vfl"
    summary = (
        "HE-VFL: Taylor logistic regression, CKKS (TenSEAL) / Paillier / plain, key at "
        "a coordinator, masked gradients"
    )
    family = "he"
    models = ("glm",)
    uses_server = True
    options = {
        "scheme": Option(
            str,
            "ckks",
            "encryption: ckks, paillier, or plain (same protocol, no encryption)",
            choices=("ckks", "paillier", "plain"),
        ),
        "paillier_bits": Option(
            int,
            2048,
            "Paillier modulus bits (a multiple of 8)",
            ge=ph.MIN_KEY_BITS,
            le=16384,
            when=("scheme", ("paillier",)),
        ),
        "ckks_degree": Option(int, 8192, "CKKS ring degree N", ge=1024, le=65536, when=CKKS_ONLY),
        "ckks_coeff_bits": Option(
            str, "60,40,40,60", "CKKS coefficient modulus chain, bits", when=CKKS_ONLY
        ),
        "ckks_scale_bits": Option(int, 40, "CKKS scale 2^bits", ge=1, le=60, when=CKKS_ONLY),
        "ckks_rows_per_ct": Option(
            int,
            0,
            "CKKS minibatch rows per ciphertext (0 = auto)",
            ge=0,
            le=32768,
            when=CKKS_ONLY,
        ),
        "ckks_mask_bits": Option(
            int, 20, "CKKS gradient mask range 2^bits", ge=0, le=40, when=CKKS_ONLY
        ),
        "timed_batches": Option(
            int,
            0,
            "encrypted minibatches per epoch actually run (0 = all); "
            "epoch time is then extrapolated and the record says so",
            ge=0,
            le=1_000_000,
        ),
    }

    def validate(self, spec) -> None:
        super().validate(spec)
        scheme = spec.option("scheme", self)
        if spec.loss not in (None, "logistic"):
            raise ConfigError(
                f"loss for he-vfl must be 'logistic' (Taylor-approximated), got {spec.loss!r}"
            )
        if scheme == "ckks":
            try:
                ck.CKKSParams(
                    int(spec.option("ckks_degree", self)),
                    parse_coeff_bits(spec.option("ckks_coeff_bits", self)),
                    int(spec.option("ckks_scale_bits", self)),
                ).validate(depth=1)
            except ck.CKKSParameterError as exc:
                raise ConfigError(str(exc)) from None
            P = int(spec.option("ckks_rows_per_ct", self))
            slots = int(spec.option("ckks_degree", self)) // 2
            if P and slots % P:
                raise ConfigError(f"ckks_rows_per_ct must divide the {slots} slots, got {P}")
        if scheme == "paillier":
            bits = spec.option("paillier_bits", self)
            if bits % 8:
                raise ConfigError(f"paillier_bits must be a multiple of 8, got {bits!r}")

    def fit(self, ctx: RunContext) -> FitResult:
        if ctx.info.task != "binary":
            raise ConfigError(
                f"he-vfl trains logistic regression: dataset task must be "
                f"'binary', got {ctx.info.task!r} ({ctx.info.dataset})"
            )
        scheme = SCHEMES[ctx.spec.option("scheme", self)](ctx)
        scheme.setup()
        state, train_s, extra = train_taylor_he(
            ctx, scheme, int(ctx.spec.option("timed_batches", self))
        )
        extra.update(scheme.describe())
        extra["setup_s"] = round(scheme.setup_s, 6)
        fps = glm_fingerprints(state)
        if scheme.name == "ckks":
            # CKKS is approximate and SEAL draws encryption noise from its own OS-seeded PRNG
            # (TenSEAL cannot seed it): weights differ by ~1e-6 between runs even with --seed,
            # so a bit-exact fingerprint would be a false promise. Keep a coarse one in extra.
            extra["approx_fingerprint"] = {
                str(k): fingerprint(np.round(w, 3)) for k, w in state.w.items()
            }
            extra["fingerprint_note"] = (
                "none: CKKS weights vary ~1e-6 run to run (unseedable "
                "encryption noise); approx_fingerprint rounds to 1e-3"
            )
            fps = {}
        return FitResult(predict_glm(ctx, state), train_s, fingerprints=fps, extra=extra)


def train_taylor_he(
    ctx: RunContext, scheme, timed_batches: int = 0
) -> tuple[GLMState, float, dict]:
    """The SPMD training loop of the HE-VFL protocol; returns (state, train seconds, extra)."""
    rt, spec, info = ctx.rt, ctx.spec, ctx.info
    K, active, C = info.data_parties, 0, info.data_parties
    passives = list(range(1, K))
    lr = spec.lr if spec.lr is not None else DEFAULT_GLM_LR
    penalty = make_penalty(spec.penalty, spec.lam)
    state = GLMState(w={k: np.zeros(info.features_per_party[k]) for k in rt.local_parties if k < K})
    y = make_loss("logistic").encode_labels(ctx.views[active].y_train) if rt.here(active) else None
    rngs = {k: ctx.noise_rng(k, "he-vfl/mask") for k in state.w}
    # party 0's gradient message carries the bias through a column of ones (built once)
    feats = {k: ctx.views[k].X_train for k in state.w}
    if active in feats:
        feats[active] = np.hstack([feats[active], np.ones((info.n_train, 1))])
    per_epoch = n_batches(info.n_train, spec.batch_size)
    run_batches = min(per_epoch, timed_batches) if timed_batches else per_epoch
    epoch_s: list[float] = []
    epoch_cpu: list[float] = []
    batch_s: list[float] = []
    t0 = time.perf_counter()
    for epoch in range(spec.epochs):
        te, ce = time.perf_counter(), time.process_time()
        for bi, idx in enumerate(
            minibatches(info.n_train, spec.batch_size, seed=ctx.shared_seed, epoch=epoch)
        ):
            if bi >= run_batches:
                break
            tb = time.perf_counter()
            _step(ctx, scheme, state, feats, idx, y, rngs, lr, penalty, passives, C)
            batch_s.append(time.perf_counter() - tb)
        epoch_s.append(time.perf_counter() - te)
        epoch_cpu.append(time.process_time() - ce)
    train_s = time.perf_counter() - t0
    extra: dict = {
        "scheme": scheme.name,
        "loss": "taylor-2 logistic (log2 - yt/2 + t^2/8)",
        "batches_per_epoch": per_epoch,
        "batches_run_per_epoch": run_batches,
        "epoch_s": [round(t, 4) for t in epoch_s],
        "epoch_s_mean": round(float(np.mean(epoch_s)), 4),
        # CPU seconds of this process per epoch (in-process runtime: every party's work, on one
        # core); unlike wall time it does not grow when other jobs share the machine
        "epoch_cpu_s": [round(t, 4) for t in epoch_cpu],
        "epoch_cpu_s_mean": round(float(np.mean(epoch_cpu)), 4),
    }
    if run_batches < per_epoch:
        # only the first batches of each epoch ran: the epoch time is an extrapolation and the
        # model saw fewer updates than a full run (its accuracy is not the scheme's accuracy)
        est = float(np.mean(batch_s)) * per_epoch
        extra.update(
            {
                "extrapolated": True,
                "epoch_s_extrapolated": round(est, 3),
                "extrapolation": f"mean of {len(batch_s)} timed minibatches x "
                f"{per_epoch} minibatches per epoch",
                "truncated_training": True,
            }
        )
    else:
        extra["extrapolated"] = False
    return state, train_s, extra


def _step(ctx, scheme, state, feats, idx, y, rngs, lr, penalty, passives, C) -> None:
    """One minibatch of the protocol (all parties, SPMD)."""
    rt, active = ctx.rt, 0
    b = len(idx)
    Xb = {k: feats[k][idx] for k in feats}  # party 0: its columns + a column of ones
    sent = {k: rt.local(k, lambda k=k: scheme.encrypt_ir(k, Xb[k] @ state.w[k])) for k in passives}
    got = rt.gather(sent, dst=active)
    d_msg = None
    if rt.here(active):
        plain = Xb[active][:, :-1] @ state.w[active] + state.bias - 2.0 * y[idx]
        d_msg = scheme.combine(active, [got[k] for k in passives], plain)
    d_msg = rt.broadcast(d_msg, src=active, dsts=passives) if passives else d_msg
    masks, msgs = {}, {}
    for k in state.w:
        msgs[k], masks[k] = scheme.gradient_message(k, d_msg, Xb[k], rngs[k])
    got = rt.gather({k: msgs.get(k) for k in range(C)}, dst=C)
    opened = {}
    if rt.here(C):
        opened = {
            k: scheme.open(got[k], ctx.info.features_per_party[k] + (k == active)) for k in range(C)
        }
    for k in range(C):
        back = rt.send(opened.get(k), src=C, dst=k)
        if k in state.w:
            g = scheme.unmask(k, back, masks[k]) / (4.0 * b)  # undo the residual's factor 4
            w = state.w[k]
            if k == active:
                state.bias -= lr * float(g[-1])
                g = g[:-1]
            state.w[k] = penalty.prox(w - lr * (g + penalty.grad(w)), lr)
