"""Webhook targets: private, loopback and link-local addresses are refused at registration and
at delivery (after resolving the name then), and a delivery goes to the address checked."""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
from typing import Any

import httpx
import pytest

from service.webhooks import targets
from service.webhooks.delivery import Claimed, send
from service.webhooks.signing import new_secret
from tests.support.webhook_receiver import Receiver


@pytest.mark.parametrize("address", [
    "10.0.0.1", "172.16.5.4", "192.168.1.1", "127.0.0.1", "169.254.169.254", "0.0.0.0",
    "100.64.0.1", "224.0.0.1", "::1", "fe80::1", "fd00::1", "::ffff:10.0.0.1", "::ffff:127.0.0.1",
    "fec0::1"])
def test_internal_addresses_are_not_public(address: str):
    assert not targets.is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses_are(address: str):
    assert targets.is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("url", [
    "http://10.0.0.1/x", "http://127.0.0.1:8000/hooks", "http://169.254.169.254/latest/meta-data",
    "https://[::1]/x", "http://[fd00::1]:9000/", "http://localhost/x", "http://LOCALHOST./x",
    "http://api.localhost/x", "http://user:pw@10.1.2.3/x"])
def test_registration_refuses_internal_hosts(url: str):
    with pytest.raises(targets.TargetRefused):
        targets.check_registered(url)


@pytest.mark.parametrize("url", ["https://example.test/hook", "http://8.8.8.8/x",
                                 "https://hooks.example.com:8443/a?b=c"])
def test_registration_accepts_public_hosts(url: str):
    targets.check_registered(url)


def _resolving_to(monkeypatch: pytest.MonkeyPatch, *addresses: str) -> None:
    def fake(host: str, port: int, *args: Any, **kw: Any) -> list[Any]:
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                 (a, port)) for a in addresses]
    monkeypatch.setattr(socket, "getaddrinfo", fake)


def test_a_name_that_now_resolves_inside_is_refused(monkeypatch: pytest.MonkeyPatch):
    _resolving_to(monkeypatch, "93.184.216.34", "169.254.169.254")  # one bad answer is enough
    with pytest.raises(targets.TargetRefused):
        targets.resolve_checked("https://hooks.example.com/x")


def test_a_delivery_is_pinned_to_the_checked_address(monkeypatch: pytest.MonkeyPatch):
    _resolving_to(monkeypatch, "93.184.216.34")
    pinned = targets.resolve_checked("https://hooks.example.com:8443/a?b=c")
    assert pinned == targets.Pinned("https://93.184.216.34:8443/a?b=c",
                                    "hooks.example.com:8443", "hooks.example.com")
    _resolving_to(monkeypatch, "2606:4700::1")
    assert targets.resolve_checked("http://h.example.com/x") == targets.Pinned(
        "http://[2606:4700::1]/x", "h.example.com", None)


def _claimed(url: str, secret: str) -> Claimed:
    return Claimed(1, 1, url, (secret,), "evt_x", '{"id": "evt_x"}', dt.datetime.now(dt.UTC))


def test_send_refuses_a_loopback_receiver_unless_private_targets_are_allowed():
    secret = new_secret()
    receiver = Receiver(secrets=[secret]).start()
    try:
        with httpx.Client(timeout=5) as client:
            refused = send(client, _claimed(receiver.url, secret))
            assert refused.status_code is None and "refused" in (refused.error or "")
            assert receiver.received == [] and receiver.refused == 0  # never connected
            by_name = send(client, _claimed(receiver.url.replace("127.0.0.1", "localhost"),
                                            secret))
            assert by_name.status_code is None and "refused" in (by_name.error or "")
            allowed = send(client, _claimed(receiver.url, secret), allow_private=True)
            assert allowed.ok and len(receiver.received) == 1
    finally:
        receiver.stop()
