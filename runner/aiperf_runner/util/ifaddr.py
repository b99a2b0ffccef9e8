"""The IPv4 address of a network interface of this machine: `python -m aiperf_runner.util.ifaddr IFACE`.

Used for `--rdzv-iface` (docs/slurm.md): a multi-node trial's rendezvous is on its first node at
that interface's address (the high-speed network's, say `ib0`) rather than at the node's NodeAddr,
which is often the management Ethernet. The batch script and the slurm-steps backend run this on
the first node; it prints the address, or an error on stderr and exits 2 (no such interface, or
no IPv4 address on it). Standard library only (the SIOCGIFADDR ioctl): containers often lack `ip`.
"""

from __future__ import annotations

import fcntl
import socket
import struct
import sys

SIOCGIFADDR = 0x8915  # linux/sockios.h


def interface_address(iface: str) -> str:
    """The interface's IPv4 address; OSError with a reason when there is none."""
    if not iface or len(iface.encode()) > 15:
        raise OSError(f"{iface!r} is not an interface name")
    if iface not in {name for _, name in socket.if_nameindex()}:
        raise OSError(f"no network interface {iface!r} on {socket.gethostname()}")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, struct.pack("256s", iface.encode()))
        except OSError as exc:
            raise OSError(f"network interface {iface!r} has no IPv4 address ({exc.strerror})") from None
    return socket.inet_ntoa(packed[20:24])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m aiperf_runner.util.ifaddr IFACE", file=sys.stderr)
        return 2
    try:
        print(interface_address(args[0]))
    except OSError as exc:
        print(f"aiperf: --rdzv-iface: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
