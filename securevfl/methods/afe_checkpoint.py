"""What a checkpoint keeps of afe-vfl's hooks (``securevfl.model.checkpoint_privacy``): each passive
party's draw counts (embedding, statistics and DP-SGD noise: positions, never a key) and its
rescaling state (a moving average of DP releases: post-processing), and the label holder's
contrastive diagnostics. The last epoch's kept embeddings and fill norms are empty at every
checkpoint (a checkpoint is never written after the last epoch)."""

from __future__ import annotations

from typing import Any

import numpy as np

from securevfl.errors import ConfigError


class AFECheckpoint:
    """Mixin of :class:`~securevfl.methods.afe_hooks.AFEHooks`: its checkpoint state."""

    rngs: dict[int, Any]
    stats_rngs: dict[int, Any]
    bottom_rngs: dict[int, Any]
    scalers: dict[int, Any]
    fcm_kept: list[float]

    def checkpoint_refusal(self, ctx: Any) -> str | None:
        return None

    def checkpoint_state(self, ctx: Any, k: int) -> tuple[dict[str, np.ndarray], dict]:
        if k not in self.rngs:
            return {}, {}
        st = self.scalers[k]
        counts = {
            "noise_draws": self.rngs[k].drawn,
            "stats_draws": self.stats_rngs[k].drawn,
            "bottom_draws": self.bottom_rngs[k].drawn,
            "mean_d": st.mean_d,
            "mean_sq_d": st.mean_sq_d,
            "factor": st.factor,
        }
        arrays = {"centre": st.centre, "fcm_kept": np.asarray(self.fcm_kept, dtype=float)}
        return arrays, counts

    def restore_checkpoint(
        self, ctx: Any, k: int, arrays: dict[str, np.ndarray], counts: dict, replay: bool
    ) -> None:
        if k not in self.rngs:
            return
        if replay:  # noise from --seed: each generator continues where the run stopped
            self.rngs[k].skip(int(counts["noise_draws"]))
            self.stats_rngs[k].skip(int(counts["stats_draws"]))
            self.bottom_rngs[k].skip(int(counts["bottom_draws"]))
        st = self.scalers[k]
        if arrays["centre"].shape != st.centre.shape:
            raise ConfigError(
                f"checkpoint's rescaling centre must be {st.centre.shape}, got "
                f"{arrays['centre'].shape}"
            )
        st.centre = np.array(arrays["centre"], dtype=float)
        st.mean_d = None if counts["mean_d"] is None else float(counts["mean_d"])
        st.mean_sq_d, st.factor = float(counts["mean_sq_d"]), float(counts["factor"])
        self.fcm_kept[:] = [float(v) for v in arrays["fcm_kept"]]  # one shared list
