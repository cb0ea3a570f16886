"""Where a webhook may be sent: public addresses only, unless private targets are allowed.

A webhook URL is chosen by whoever manages the tenant's endpoints, and the dispatcher that
POSTs to it sits inside the deployment: without this check an endpoint such as
``http://169.254.169.254/...`` (a cloud metadata service), ``http://10.0.0.1/...`` or
``http://127.0.0.1:6379/`` makes the dispatcher a proxy into the private network.

Two checks: at registration the URL's host, when it is an address or a local name
(``localhost``), is refused at once; at delivery every address the host resolves to *now*
is checked (DNS can change after registration), and the request is sent to the address that
was checked, so a second lookup cannot swap in another. ``FAIRWAY_WEBHOOK_ALLOW_PRIVATE``
lifts both, for on-premises receivers on a private network.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Carrier-grade NAT (RFC 6598) is shared address space, not public, though
# ipaddress.is_private leaves it out.
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_LOCAL_NAMES = ("localhost", "localhost.localdomain")


class TargetRefused(ValueError):
    """The URL's host is, or resolves to, an address webhooks may not reach."""


def is_public(address: Address) -> bool:
    """False for loopback, private, link-local (cloud metadata), shared, multicast, reserved
    and unspecified addresses, including IPv4 ones written as IPv6 (::ffff:10.0.0.1)."""
    if isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped or address.sixtofour
        if mapped is not None:
            return is_public(mapped)
    if isinstance(address, ipaddress.IPv4Address) and address in _SHARED:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return False
    return not (address.is_private or address.is_loopback or address.is_link_local
                or address.is_multicast or address.is_reserved or address.is_unspecified)


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def check_registered(url: str) -> None:
    """At registration: refuse a URL whose host is a non-public address or a local name.
    Other names are checked when a delivery resolves them."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    address = _literal(host)
    if address is not None and not is_public(address):
        raise TargetRefused(f"url's host {host} is a private, loopback or link-local address; "
                            "webhooks go to public addresses only (FAIRWAY_WEBHOOK_ALLOW_PRIVATE "
                            "allows private ones)")
    if host in _LOCAL_NAMES or host.endswith(".localhost"):
        raise TargetRefused(f"url's host {host} names this machine; webhooks go to public "
                            "addresses only (FAIRWAY_WEBHOOK_ALLOW_PRIVATE allows private ones)")


@dataclass(frozen=True, slots=True)
class Pinned:
    """Where to send: the URL with its host replaced by the checked address, the Host header
    and the TLS server name the original host needs (None: nothing to replace)."""

    url: str
    host_header: str | None = None
    sni_hostname: str | None = None


def resolve_checked(url: str) -> Pinned:
    """At delivery: resolve the host, refuse if any of its addresses is not public, and pin
    the request to the first one. Raises TargetRefused, or OSError when the name does not
    resolve."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    address = _literal(host)
    if address is not None:
        if not is_public(address):
            raise TargetRefused(f"{host} is not a public address")
        return Pinned(url)
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    refused = [str(a) for a in addresses if not is_public(a)]
    if refused or not addresses:
        raise TargetRefused(f"{host} resolves to a non-public address ({', '.join(refused)})")
    first = addresses[0]
    literal = f"[{first}]" if first.version == 6 else str(first)
    userinfo, _, hostport = parts.netloc.rpartition("@")
    netloc = f"{literal}:{parts.port}" if parts.port else literal
    if userinfo:
        netloc = f"{userinfo}@{netloc}"
    pinned = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return Pinned(pinned, hostport, host if parts.scheme == "https" else None)
