"""Memory a setting needs, checked against the machine's before anything is allocated.

Some settings ask for more memory than any machine has (``pbm-vfl --b 1000000``: the PBM
accountant's pmf tables alone are (b*M + 1)^2 doubles, terabytes). Started anyway, they are
killed by the kernel after taking the machine's memory from everyone else. Each estimate here is
a *lower bound* on what the run allocates (the largest structures, counted once), so a refusal is
never wrong; a setting that passes may still need more.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from securevfl.errors import ConfigError

Estimate = Callable[[Any, int], list[tuple[str, int, str]]]  # (spec, data parties) -> needs
_ESTIMATES: dict[str, Estimate] = {}
SYNTHETIC_D = 40  # the synthetic datasets' default width (securevfl.data.synthetic)


def available_memory() -> int:
    """Bytes this process may still allocate: MemAvailable, capped by a cgroup limit."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    if avail is None:
        avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = open(path).read().strip()
        except OSError:
            continue
        if raw.isdigit():
            avail = min(avail, int(raw))
    return avail


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far: VmHWM where Linux has it.

    Not ru_maxrss: Linux carries ru_maxrss across fork and exec, so a party process started by
    a large launcher (torch loaded) reported the launcher's size as its own floor; VmHWM
    belongs to the process's own address space and starts afresh at exec.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def current_rss_bytes() -> int:
    """Resident memory of this process now (/proc/self/statm; 0 where it is missing)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of its children that have exited (the
    in-process runtime's local MPyC parties): a run's CPU cost, comparable across methods."""
    import resource

    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def register_estimate(method: str, fn: Estimate) -> None:
    """Add a method's memory lower bound (several methods may share one)."""
    _ESTIMATES[method] = fn


def needs(spec: Any, data_parties: int) -> list[tuple[str, int, str]]:
    """(what, bytes, how to lower it) for every structure of this spec with a known size."""
    out = _data_need(spec)
    fn = _ESTIMATES.get(spec.method)
    if fn is not None:
        out += fn(spec, data_parties)
    return out


def check_memory(spec: Any, data_parties: int, *, available: int | None = None) -> None:
    """Raise ConfigError (one line) if a lower bound of the run's memory exceeds the machine's."""
    avail = available_memory() if available is None else available
    for what, nbytes, fix in needs(spec, data_parties):
        if nbytes > avail:
            raise ConfigError(
                f"{spec.method} needs at least {fmt_bytes(nbytes)} for {what}, this machine has "
                f"{fmt_bytes(avail)} available: {fix}"
            )


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} PiB"


def _data_need(spec: Any) -> list[tuple[str, int, str]]:
    """A generated dataset of n rows, in float64: held once in all (every party process holds
    its own columns, split in place; an in-process run holds them once more as views)."""
    opts = getattr(spec, "dataset_options", {}) or {}
    n = opts.get("n")
    if not isinstance(n, (int, float)) or isinstance(n, bool):
        return []
    d = opts.get("d", SYNTHETIC_D)
    d = d if isinstance(d, (int, float)) and not isinstance(d, bool) else SYNTHETIC_D
    return [(f"the data table ({int(n):,} x {int(d)} values)", int(n * d * 8), "lower --n")]


def _pbm_need(spec: Any, data_parties: int) -> list[tuple[str, int, str]]:
    b = spec.options.get("b", 64)
    if not isinstance(b, (int, float)) or isinstance(b, bool):
        return []
    N = int(b) * data_parties  # trials in the secure sum of one coordinate
    return [
        (
            f"the PBM accountant's pmf tables ((b*M + 1)^2 = {(N + 1) ** 2:.3g} doubles, "
            f"b = {int(b)}, M = {data_parties})",
            8 * (N + 1) ** 2,
            "lower --b (or --parties)",
        )
    ]


def _secure_product_need(spec: Any, data_parties: int) -> list[tuple[str, int, str]]:
    """fm-vfl's secure products (protocols/shamir_rns.py, streamed over row blocks), in the
    largest party's process: its own n x c columns (c >= ceil(d / K); float64) and their
    fixed-point encoding (int64) at once, plus two blocks of float32 shares of every dealer's
    columns in r residues while streaming (r >= the primes for n * 4**4: at least 4 fractional
    bits). Not the whole table: that is what streaming buys (10M rows, d = 40, K = 2: 3.2 GB
    where holding every share at once took about 12 GiB)."""
    opts = getattr(spec, "dataset_options", {}) or {}
    n, d = opts.get("n"), opts.get("d", SYNTHETIC_D)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (n, d)):
        return []
    from protocols import rns, shamir_rns  # noqa: PLC0415  (cryptography only on use)

    n, d, k = int(n), int(d), max(int(data_parties), 1)
    c = -(-d // k)
    r = len(rns.primes_for(n * 4**4))
    stream = 2 * min(n, shamir_rns.BLOCK_ROWS) * r * 4 * (d + 1)
    return [
        (
            f"the secure product's inputs and streamed shares ({n:,} x {c} values and their "
            f"encoding, "
            f"2 blocks of {min(n, shamir_rns.BLOCK_ROWS):,} rows x {d + 1} columns x {r} residues)",
            2 * n * c * 8 + stream,
            "lower --n (or raise --parties)",
        )
    ]


register_estimate("pbm-vfl", _pbm_need)
register_estimate("fm-vfl", _secure_product_need)
