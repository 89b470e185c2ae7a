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
Scores are computed by the shared GLM predictor (plain IRs to party 0, metered as 'eval'): at
training's end every data party holds its weights in the clear (step 5), and the test rows are
scored as FATE's hetero LR scores them, without encryption and without the coordinator. So
``--save`` writes each data party's plain weights (party 0 also the bias), exactly those it
scored with, and nothing at the coordinator: its secret key served only the gradient openings
and never reaches the disk. ``securevfl predict`` replays the same plain scoring.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from baselines.he_hooks import HEHooks
from baselines.he_schemes import DEFAULT_COEFF_BITS, DEFAULT_SCALE_BITS, SCHEMES, ckks_params
from protocols import paillier_he as ph
from securevfl.context import RunContext, fingerprint
from securevfl.errors import ConfigError
from securevfl.methods.base import Method, register_method
from securevfl.options import Option
from securevfl.results import FitResult
from securevfl.training import GLMState, glm_fingerprints, n_batches, predict_glm, train_glm
from securevfl.training.export import export_glm
from securevfl.training.glm_trainer import resolve_loss


def taylor_loss(theta: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log 2 - y theta / 2 + theta^2 / 8, y in {-1, +1}."""
    return np.log(2.0) - 0.5 * y * theta + 0.125 * theta**2


def taylor_derivative(theta: np.ndarray, y: np.ndarray) -> np.ndarray:
    """d/dtheta of :func:`taylor_loss`: theta / 4 - y / 2."""
    return 0.25 * theta - 0.5 * y


CKKS_ONLY = ("scheme", ("ckks",))  # option applies only to CKKS runs
PAILLIER_ONLY = ("scheme", ("paillier",))


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
            when=PAILLIER_ONLY,
        ),
        "paillier_randomness": Option(
            str,
            "full",
            "Paillier encryption randomness: full (r^n, textbook) or djn (h_s^a with a of "
            "n_bits/2 bits from a fixed-base table: ~14x faster encryption, DJN assumption)",
            choices=("full", "djn"),
            when=PAILLIER_ONLY,
        ),
        "ckks_degree": Option(int, 8192, "CKKS ring degree N", ge=1024, le=65536, when=CKKS_ONLY),
        "ckks_coeff_bits": Option(
            str,
            DEFAULT_COEFF_BITS,
            "CKKS coefficient modulus chain, bits (the last prime is the special prime)",
            when=CKKS_ONLY,
        ),
        "ckks_scale_bits": Option(
            int,
            DEFAULT_SCALE_BITS,
            "CKKS scale 2^bits of the encrypted residual (checked for the gradient's precision)",
            ge=1,
            le=60,
            when=CKKS_ONLY,
        ),
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
        "timed_epochs": Option(
            int,
            0,
            "with timed_batches: the epochs actually run (0 = all); the training time is "
            "extrapolated to --epochs (a timing run: its model is not the scheme's)",
            ge=0,
            le=1_000_000,
        ),
    }

    def validate(self, spec) -> None:
        super().validate(spec)
        if spec.option("timed_epochs", self) and not spec.option("timed_batches", self):
            raise ConfigError("timed_epochs needs timed_batches > 0 (it shortens a timing run)")
        scheme = spec.option("scheme", self)
        if spec.loss not in (None, "logistic"):
            raise ConfigError(
                f"loss for he-vfl must be 'logistic' (Taylor-approximated), got {spec.loss!r}"
            )
        if scheme == "ckks":
            ckks_params(spec.options, spec.batch_size)  # secure, fits, precise enough at b
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
        timed = int(ctx.spec.option("timed_batches", self))
        run_epochs = int(ctx.spec.option("timed_epochs", self)) if timed else 0
        state, train_s, extra = train_taylor_he(ctx, scheme, timed, run_epochs)
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
        scores = predict_glm(ctx, state)  # plain IRs to party 0; fills state.scored
        # each data party's part: the plain weights it scored with; the coordinator has none
        # (its secret key only opened masked gradients: it is not part of the model)
        model = export_glm(ctx, state, scored=state.scored, loss_name=resolve_loss(ctx).name)
        for part in model.values():
            part.meta.update(he_scheme=scheme.name, secret_files=[])
        return FitResult(scores, train_s, fingerprints=fps, extra=extra, model=model)


def train_taylor_he(
    ctx: RunContext, scheme, timed_batches: int = 0, timed_epochs: int = 0
) -> tuple[GLMState, float, dict]:
    """HE-VFL on the shared GLM trainer; returns (state, train seconds, extra). A timing run
    (``timed_batches``) may also stop after ``timed_epochs`` epochs (0: all of them)."""
    per_epoch = n_batches(ctx.info.n_train, ctx.spec.batch_size)
    epochs = ctx.spec.epochs
    if 0 < timed_epochs < epochs:
        ctx = dataclasses.replace(ctx, spec=dataclasses.replace(ctx.spec, epochs=timed_epochs))
    hooks = HEHooks(ctx, scheme, timed_batches)
    run_batches = hooks.batches_per_epoch(ctx, per_epoch)
    hooks.start()
    state, train_s = train_glm(ctx, hooks)
    epoch_s, epoch_cpu = hooks.epoch_s, hooks.epoch_cpu
    phases = dict(scheme.clock.seconds)
    phases["other"] = phases.get("other", 0.0) + max(0.0, train_s - sum(phases.values()))
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
        # where the training seconds went (all epochs, every party living in this process) and
        # the bytes the channel metered per protocol message
        "phases_s": {k: round(v, 4) for k, v in sorted(phases.items())},
        "phases_bytes": dict(sorted(hooks.bytes.items())),
    }
    if run_batches < per_epoch or ctx.spec.epochs < epochs:
        # only the first batches of each epoch ran: the epoch time is an extrapolation and the
        # model saw fewer updates than a full run (its accuracy is not the scheme's accuracy)
        est = float(np.mean(epoch_s)) / run_batches * per_epoch
        extra.update(
            {
                "extrapolated": True,
                "epoch_s_extrapolated": round(est, 3),
                "extrapolation": f"mean of {run_batches * ctx.spec.epochs} timed minibatches x "
                f"{per_epoch} minibatches per epoch",
                "epochs_run": ctx.spec.epochs,
                "truncated_training": True,
            }
        )
    else:
        extra["extrapolated"] = False
    return state, train_s, extra
