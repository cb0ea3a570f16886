"""Many hosts on one machine: network namespaces joined by veth pairs to a bridge, so that each
process of the stack has its own address and its own firewall, and a network fault (iptables
DROP inside one host) cuts that host alone, as a partition does between real machines.

Nothing is added to the machine's own network: the bridge lives in a namespace of its own
("switch"), every address is inside a namespace this creates, and removing the namespaces
removes the veths, the bridge and every iptables rule with them. The harness itself (its
clients, its audit) runs in a "client" host: ``Fabric.enter`` moves the calling thread there
(threads it starts afterwards inherit it)."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

CLONE_NEWNET = 0x40000000
SUBNET = "10.77.0"  # a /24 used only inside the namespaces
NETNS_DIR = "/run/netns"  # where `ip netns add` mounts a namespace


def unavailable() -> str | None:
    """Why namespaces cannot be used here (None when they can): not root, no `ip`,
    `iptables` or `haproxy` (the API replicas' balancer), or `ip netns add` refused (a
    container without CAP_SYS_ADMIN)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables", "haproxy"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed"
    probe = f"fwprobe{os.getpid()}"
    added = _run(["ip", "netns", "add", probe], check=False)
    if added.returncode != 0:
        return f"`ip netns add` failed: {added.stderr.strip()}"
    try:
        rules = _run(["ip", "netns", "exec", probe, "iptables", "-S"], check=False)
        if rules.returncode != 0:
            return f"iptables does not work in a namespace: {rules.stderr.strip()}"
    finally:
        _run(["ip", "netns", "del", probe], check=False)
    return None


@dataclass
class Fabric:
    """The hosts (name -> address), their namespaces and the switch between them."""

    hosts: Sequence[str]
    prefix: str = field(default_factory=lambda: f"fw{os.getpid() % 100000}")
    addresses: dict[str, str] = field(default_factory=dict)
    _made: list[str] = field(default_factory=list)
    _home: int | None = None  # the caller's own namespace, to go back to

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def create(self) -> None:
        """Builds the switch and one namespace per host, each with ``eth0`` on the bridge and
        the next address of ``SUBNET``. On a failure part-way, ``remove`` undoes what was made."""
        self._add_ns(self.switch)
        self.exec(self.switch, ["ip", "link", "add", "br0", "type", "bridge"])
        self.exec(self.switch, ["ip", "link", "set", "br0", "up"])
        for i, host in enumerate(self.hosts):
            ns, port = self.ns(host), f"p{i}"  # the switch's end of the pair
            self._add_ns(ns)
            _run(["ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port,
                  "netns", self.switch])
            self.exec(self.switch, ["ip", "link", "set", port, "master", "br0", "up"])
            address = f"{SUBNET}.{i + 2}"
            self.exec(ns, ["ip", "addr", "add", f"{address}/24", "dev", "eth0"])
            self.exec(ns, ["ip", "link", "set", "eth0", "up"])
            self.exec(ns, ["ip", "link", "set", "lo", "up"])
            self.addresses[host] = address

    def remove(self) -> None:
        """Deletes every namespace made (with its veths, bridge and rules); never raises."""
        self.leave()
        for ns in reversed(self._made):
            _run(["ip", "netns", "del", ns], check=False)
        self._made.clear()

    def exec(self, host_ns: str, argv: Sequence[str], check: bool = True
             ) -> subprocess.CompletedProcess[str]:
        return _run(["ip", "netns", "exec", host_ns, *argv], check=check)

    def prefix_argv(self, host: str) -> list[str]:
        """What to put before a command to run it on ``host`` (it execs in place: same pid)."""
        return ["ip", "netns", "exec", self.ns(host)]

    # -- the calling thread's own host ------------------------------------------------------------
    def enter(self, host: str) -> None:
        """Moves the calling thread (and the threads it starts from now on) into ``host``."""
        if self._home is None:
            self._home = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net",
                                 os.O_RDONLY)
        fd = os.open(os.path.join(NETNS_DIR, self.ns(host)), os.O_RDONLY)
        try:
            _setns(fd)
        finally:
            os.close(fd)

    def leave(self) -> None:
        if self._home is not None:
            _setns(self._home)
            os.close(self._home)
            self._home = None

    # -- faults: a host's packets to one port of another host dropped -----------------------------
    def cut(self, host: str, to_host: str, port: int) -> None:
        self.exec(self.ns(host), ["iptables", *_drop_rule("-A", self.addresses[to_host], port)])

    def heal(self, host: str, to_host: str, port: int) -> None:
        self.exec(self.ns(host), ["iptables", *_drop_rule("-D", self.addresses[to_host], port)],
                  check=False)

    # -- faults on a host's whole link (its eth0, both ways) ----------------------------------
    def isolate(self, host: str) -> None:
        """Every packet in or out of ``host``'s link dropped: the host is gone from the
        network without knowing it, and nobody hears from it (no reset, no goodbye)."""
        for rule in _link_rules("-A", "-j", "DROP"):
            self.exec(self.ns(host), ["iptables", *rule])

    def rejoin(self, host: str) -> None:
        for rule in _link_rules("-D", "-j", "DROP"):
            self.exec(self.ns(host), ["iptables", *rule], check=False)

    def lossy(self, host: str, share: float) -> None:
        """Drops ``share`` of the packets in and out of ``host``'s link, at random (iptables'
        ``statistic`` match: the kernel here has no netem)."""
        for rule in _link_rules("-A", *_random_drop(share)):
            self.exec(self.ns(host), ["iptables", *rule])

    def lossless(self, host: str, share: float) -> None:
        for rule in _link_rules("-D", *_random_drop(share)):
            self.exec(self.ns(host), ["iptables", *rule], check=False)

    def link_packets(self, host: str) -> int:
        """Packets through ``host``'s link so far, both ways (as its interface counts them:
        those dropped on the way out never reach it)."""
        shown = self.exec(self.ns(host), ["ip", "-j", "-s", "link", "show", "eth0"]).stdout
        stats = json.loads(shown)[0]["stats64"]
        return int(stats["rx"]["packets"]) + int(stats["tx"]["packets"])

    def randomly_dropped(self, host: str) -> tuple[int, int]:
        """Packets the ``lossy`` rules of ``host`` dropped so far: (in, out)."""
        counts = []
        for chain in ("INPUT", "OUTPUT"):
            listing = self.exec(self.ns(host), ["iptables", "-nvxL", chain]).stdout
            counts.append(sum(int(line.split()[0]) for line in listing.splitlines()
                              if "statistic" in line and "DROP" in line))
        return counts[0], counts[1]

    def _add_ns(self, ns: str) -> None:
        _run(["ip", "netns", "del", ns], check=False)  # a killed earlier run's leftover
        _run(["ip", "netns", "add", ns])
        self._made.append(ns)


def _drop_rule(op: str, address: str, port: int) -> list[str]:
    # OUTPUT: the host's own packets, on new and established connections alike, so an open
    # pooled connection stalls as it would behind a dead link (no reset, no refusal).
    return [op, "OUTPUT", "-p", "tcp", "-d", address, "--dport", str(port), "-j", "DROP"]


def _link_rules(op: str, *match: str) -> list[list[str]]:
    return [[op, "INPUT", "-i", "eth0", *match], [op, "OUTPUT", "-o", "eth0", *match]]


def _random_drop(share: float) -> list[str]:
    return ["-m", "statistic", "--mode", "random", "--probability", f"{share:g}", "-j", "DROP"]


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return done


def _setns(fd: int) -> None:
    # Python 3.11 has no os.setns; libc's acts on the calling thread only.
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns failed")
