"""A saved split-NN part's layers rebuilt from their specs: an allow-list, no code from files.

``training.export.flatten_module`` writes each layer as a spec (its type and integer sizes) and
its arrays; here each spec is checked (type on the allow-list, sizes positive integers within
bounds) and each array against it (exact shape, dtype kind) **before** any torch module is
allocated, so a card that announces a huge layer is refused without allocating it. The CNN
bottom (``models.conv_bottom``) adds ``place`` (its pixels scattered into their image rows by a
constant index), ``conv2d``, ``maxpool2d``, ``adaptive_avgpool2d`` and ``flatten``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from securevfl.model.files import ModelFileError

TYPES = (
    "linear",
    "relu",
    "tanh",
    "corners",
    "sphere",
    "place",
    "conv2d",
    "maxpool2d",
    "adaptive_avgpool2d",
    "flatten",
)
MAX_SIZE = 1 << 20  # a width, channel count or image side larger than this is refused
MAX_KERNEL = 64


def _int(s: Mapping[str, Any], key: str, where: str, *, lo: int = 1, hi: int = MAX_SIZE) -> int:
    v = s.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ModelFileError(
            f"layer {where} must have {key!r} an integer in [{lo}, {hi}], got {v!r}"
        )
    return v


def _pair(s: Mapping[str, Any], key: str, where: str, *, lo: int, hi: int) -> tuple[int, int]:
    v = s.get(key)
    if not isinstance(v, list) or len(v) != 2:
        raise ModelFileError(f"layer {where} must have {key!r} a list of 2 integers, got {v!r}")
    return (
        _int({key: v[0]}, key, where, lo=lo, hi=hi),
        _int({key: v[1]}, key, where, lo=lo, hi=hi),
    )


def _array(
    arrays: Mapping[str, np.ndarray], name: str, shape: tuple[int, ...], kinds: str
) -> np.ndarray:
    """The named array, refused unless it has exactly ``shape`` and a dtype of ``kinds``."""
    a = arrays.get(name)
    if a is None:
        raise ModelFileError(f"model part must hold array {name!r}, not found")
    if a.shape != shape or a.dtype.kind not in kinds:
        raise ModelFileError(
            f"array {name!r} must have shape {shape} and dtype kind {kinds!r}, got "
            f"{a.shape} {a.dtype}"
        )
    return a


def check_layers(
    specs: Any, arrays: Mapping[str, np.ndarray], prefix: str
) -> list[tuple[str, dict[str, Any]]]:
    """Each spec's type and checked sizes and arrays (nothing allocated yet)."""
    if not isinstance(specs, list):
        raise ModelFileError(f"layer specs must be a list, got {type(specs).__name__}")
    out: list[tuple[str, dict[str, Any]]] = []
    side: tuple[int, int] | None = None  # the image's (rows, width) once a place layer made one
    for i, s in enumerate(specs):
        t, w = (s.get("type") if isinstance(s, dict) else None), f"{prefix}{i}"
        if t not in TYPES:
            raise ModelFileError(f"layer type must be one of {', '.join(TYPES)}, got {t!r}")
        arg: dict[str, Any] = {}
        if t == "linear":
            n_in, n_out = _int(s, "in", w), _int(s, "out", w)
            arg["weight"] = _array(arrays, f"{w}.weight", (n_out, n_in), "f")
            arg["bias"] = _array(arrays, f"{w}.bias", (n_out,), "f")
        elif t == "conv2d":
            c_in, c_out = _int(s, "in", w), _int(s, "out", w)
            k = _pair(s, "kernel", w, lo=1, hi=MAX_KERNEL)
            arg["padding"] = _pair(s, "padding", w, lo=0, hi=MAX_KERNEL)
            arg["stride"] = _pair(s, "stride", w, lo=1, hi=MAX_KERNEL)
            arg["weight"] = _array(arrays, f"{w}.weight", (c_out, c_in, *k), "f")
            arg["bias"] = _array(arrays, f"{w}.bias", (c_out,), "f")
            side = _after(side, k, arg["stride"], arg["padding"], w)
        elif t == "maxpool2d":
            arg["kernel"] = _pair(s, "kernel", w, lo=1, hi=MAX_KERNEL)
            arg["stride"] = _pair(s, "stride", w, lo=1, hi=MAX_KERNEL)
            side = _after(side, arg["kernel"], arg["stride"], (0, 0), w)
        elif t == "adaptive_avgpool2d":
            # a pool's grid is never finer than its input (a 4096 x 4096 one allocated 7.58 GB)
            most = side or (MAX_KERNEL, MAX_KERNEL)
            arg["out"] = (
                _int({"out": _pair(s, "out", w, lo=1, hi=MAX_SIZE)[0]}, "out", w, hi=most[0]),
                _int({"out": s["out"][1]}, "out", w, hi=most[1]),
            )
            side = arg["out"]
        elif t == "place":
            n_in, rows, width = _int(s, "in", w), _int(s, "rows", w), _int(s, "width", w)
            scale = s.get("input_scale")
            if not isinstance(scale, (int, float)) or not 0 < float(scale) < float("inf"):
                raise ModelFileError(
                    f"layer {w} (place) must have an input_scale > 0, got {scale!r}"
                )
            index = _array(arrays, f"{w}.index", (rows * width,), "iu")
            if index.size and (int(index.min()) < 0 or int(index.max()) > n_in):
                raise ModelFileError(
                    f"array '{w}.index' must hold positions in [0, {n_in}], got "
                    f"[{int(index.min())}, {int(index.max())}]"
                )
            arg.update(n_in=n_in, rows=rows, width=width, scale=float(scale), index=index)
            side = (rows, width)
        elif t in ("corners", "sphere"):
            bound = s.get("bound")
            if not isinstance(bound, (int, float)) or not 0 < float(bound) < float("inf"):
                raise ModelFileError(f"layer {w} ({t}) must have a bound > 0, got {bound!r}")
            arg["bound"] = float(bound)
        out.append((t, arg))
    return out


def _after(
    side: tuple[int, int] | None, kernel: tuple[int, int], stride: tuple[int, int], pad: Any, w: str
) -> tuple[int, int] | None:
    """The image side after a convolution or pooling (refused where the kernel does not fit)."""
    if side is None:
        return None
    out = tuple((n + 2 * p - k) // s + 1 for n, k, s, p in zip(side, kernel, stride, pad))
    if min(out) < 1:
        raise ModelFileError(f"layer {w} must fit its {side[0]} x {side[1]} input, got {kernel}")
    return out  # type: ignore[return-value]


def rebuild_layers(specs: Any, arrays: Mapping[str, np.ndarray], prefix: str) -> Any:
    """A torch Sequential rebuilt from allow-listed layer specs and their arrays (checked first,
    :func:`check_layers`), in eval mode."""
    import torch
    from torch import nn

    from securevfl.models.conv_bottom import place_pixels
    from securevfl.models.release_shapes import Corners, Sphere

    class Place(nn.Module):
        """The CNN bottom's scatter of a party's pixels into their band of image rows."""

        def __init__(self, n_in: int, rows: int, width: int, scale: float, index: Any) -> None:
            super().__init__()
            self.n_in, self.rows, self.width, self.scale = n_in, rows, width, scale
            self.register_buffer("index", torch.as_tensor(np.asarray(index, dtype=np.int64)))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.shape[1] != self.n_in:
                raise ModelFileError(f"place layer must get {self.n_in} columns, got {x.shape[1]}")
            return place_pixels(x, self.index, self.rows, self.width, self.scale)

    def weights(m: nn.Module, arg: dict[str, Any]) -> nn.Module:
        with torch.no_grad():
            m.weight.copy_(torch.from_numpy(np.asarray(arg["weight"], dtype=np.float32)))
            m.bias.copy_(torch.from_numpy(np.asarray(arg["bias"], dtype=np.float32)))
        return m

    mods: list[nn.Module] = []
    for t, arg in check_layers(specs, arrays, prefix):
        if t == "linear":
            n_out, n_in = arg["weight"].shape
            mods.append(weights(nn.Linear(n_in, n_out), arg))
        elif t == "conv2d":
            c_out, c_in, kh, kw = arg["weight"].shape
            conv = nn.Conv2d(c_in, c_out, (kh, kw), stride=arg["stride"], padding=arg["padding"])
            mods.append(weights(conv, arg))
        elif t == "maxpool2d":
            mods.append(nn.MaxPool2d(arg["kernel"], stride=arg["stride"]))
        elif t == "adaptive_avgpool2d":
            mods.append(nn.AdaptiveAvgPool2d(arg["out"]))
        elif t == "flatten":
            mods.append(nn.Flatten())
        elif t == "place":
            mods.append(Place(arg["n_in"], arg["rows"], arg["width"], arg["scale"], arg["index"]))
        elif t in ("relu", "tanh"):
            mods.append(nn.ReLU() if t == "relu" else nn.Tanh())
        else:
            mods.append((Corners if t == "corners" else Sphere)(arg["bound"]))
    return nn.Sequential(*mods).eval()
