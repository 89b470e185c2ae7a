"""Free TCP ports on the loopback interface for locally started party processes."""

from __future__ import annotations

import socket


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports that are free right now (all sockets held until all are found)."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports
