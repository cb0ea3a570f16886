"""The API replicas' balancer for `fairway chaos --hosts`: haproxy (Debian's package) on a host
of its own, one address in front of every replica, as a cloud load balancer or a Service is.

It relays TCP (SSE streams pass as they come), round-robin, and checks each replica's
``/healthz`` every 0.5 s: two failed checks take a replica out, and the sessions it carried are
closed at once (``on-marked-down shutdown-sessions``), so a client streaming through a replica
that fell off the network learns it within about a second instead of waiting out a read
timeout. A connection that cannot reach its replica is tried on another (``redispatch``)."""

from __future__ import annotations

import csv
import io
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

CHECK_INTERVAL_MS = 500
# A ``show sess`` line: "0x...: proto=tcpv4 src=10.0.0.1:40112 fe=api be=replicas srv=api-2 ..."
_SESSION = re.compile(r"\bsrc=\S*:(\d+) .*\bsrv=(\S+)")


def config(bind: str, port: int, replicas: dict[str, str], stats_socket: Path) -> str:
    """haproxy.cfg for ``replicas`` (name -> address, all on ``port``), listening on
    ``bind:port``."""
    servers = "\n".join(f"  server {name} {address}:{port} check"
                        for name, address in replicas.items())
    return f"""global
  maxconn 4096
  stats socket {stats_socket} mode 600 level admin

defaults
  mode tcp
  timeout connect 1s
  timeout client 10m
  timeout server 10m
  retries 2
  option redispatch

frontend api
  bind {bind}:{port}
  default_backend replicas

backend replicas
  balance roundrobin
  option httpchk
  http-check send meth GET uri /healthz ver HTTP/1.1 hdr Host balancer
  default-server inter {CHECK_INTERVAL_MS} fall 2 rise 2 on-marked-down shutdown-sessions
{servers}
"""


@dataclass
class Balancer:
    """haproxy run by ``prefix`` (what puts a command on the balancer's host)."""

    prefix: list[str]
    bind: str
    port: int
    replicas: dict[str, str]
    work_dir: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.bind}:{self.port}"

    @property
    def stats_socket(self) -> Path:
        return self.work_dir / "haproxy.sock"

    def start(self) -> None:
        binary = shutil.which("haproxy")
        if binary is None:
            raise RuntimeError("`haproxy` is not installed (apt-get install haproxy)")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.work_dir / "haproxy.cfg"
        cfg.write_text(config(self.bind, self.port, self.replicas, self.stats_socket))
        with open(self.work_dir / "haproxy.log", "ab") as log:
            # -db: stay in the foreground, so stopping this process stops the balancer.
            self.proc = subprocess.Popen([*self.prefix, binary, "-db", "-f", str(cfg)],
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def up(self) -> dict[str, bool]:
        """Each replica: in service (its checks pass) or not; empty while unreadable."""
        return {name: row["status"].startswith("UP") for name, row in self._stats().items()}

    def sessions(self) -> dict[str, int]:
        """Each replica's client sessions open right now."""
        return {name: int(row["scur"] or 0) for name, row in self._stats().items()}

    def replica_of_client_port(self) -> dict[int, str]:
        """Which replica each open client session goes to, by the client's port (haproxy's
        ``show sess``); empty while unreadable."""
        found: dict[int, str] = {}
        for line in self._ask("show sess").splitlines():
            match = _SESSION.search(line)
            if match and match.group(2) in self.replicas:
                found[int(match.group(1))] = match.group(2)
        return found

    def _stats(self) -> dict[str, dict[str, str]]:
        """haproxy's ``show stat`` rows of the replicas, by name; empty while unreadable."""
        raw = self._ask("show stat")
        if not raw:
            return {}
        rows = csv.DictReader(io.StringIO(raw.lstrip("# ")))
        return {r["svname"]: r for r in rows
                if r.get("pxname") == "replicas" and r.get("svname") in self.replicas}

    def _ask(self, command: str) -> str:
        """One command on the stats socket: its answer, or "" while unreadable."""
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(2.0)
                s.connect(str(self.stats_socket))
                s.sendall(command.encode() + b"\n")
                raw = b""
                while chunk := s.recv(65536):
                    raw += chunk
        except OSError:
            return ""
        return raw.decode(errors="replace")
