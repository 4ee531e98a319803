"""Which addresses a webhook may reach (``functions.domain.webhook_addresses``); the numeric
spellings of hosts are decoded in tests/integration/test_webhooks.py (this tier has no sockets)."""

from __future__ import annotations

import pytest

from functions.domain.webhook_addresses import is_this_machine, non_public_reason


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("0.0.0.0", "0.0.0.0 is unspecified"),
        ("::", ":: is unspecified"),
        ("127.0.0.1", "127.0.0.1 is loopback"),
        ("::1", "::1 is loopback"),
        ("10.0.0.5", "10.0.0.5 is private"),
        ("172.16.0.1", "172.16.0.1 is private"),
        ("192.168.1.1", "192.168.1.1 is private"),
        ("169.254.169.254", "169.254.169.254 is link-local"),
        ("fe80::1%eth0", "fe80::1 is link-local"),
        ("224.0.0.1", "224.0.0.1 is multicast"),
        ("ff02::1", "ff02::1 is multicast"),
        ("240.0.0.1", "240.0.0.1 is private"),
        ("100.64.0.1", "100.64.0.1 is not globally reachable"),
        ("fc00::1", "fc00::1 is private"),
        ("::ffff:169.254.169.254", "169.254.169.254 is link-local"),
        ("64:ff9b::a9fe:a9fe", "169.254.169.254 is link-local"),
        ("2002:a9fe:a9fe::1", "169.254.169.254 is link-local"),
        ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "10.0.0.1 is private"),  # Teredo client 10.0.0.1
        ("not-an-address", "'not-an-address' is not an IP address"),
    ],
)
def test_non_public_addresses_are_refused_with_the_reason(address, reason):
    assert non_public_reason(address) == reason


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8"])
def test_public_unicast_addresses_are_allowed(address):
    assert non_public_reason(address) is None


@pytest.mark.parametrize(
    ("address", "local"),
    [
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.1", False),
        ("8.8.8.8", False),
    ],
)
def test_this_machine_is_loopback_only(address, local):
    assert is_this_machine(address) is local
