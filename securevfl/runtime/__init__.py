"""Runtimes for SPMD protocol code: in-process (default) and networked (one process per party)."""

from securevfl.runtime.base import Runtime
from securevfl.runtime.channel import Meter
from securevfl.runtime.expect import Expect, peer_bytes
from securevfl.runtime.inprocess import InProcessRuntime

__all__ = ["Expect", "InProcessRuntime", "Meter", "Runtime", "peer_bytes"]
