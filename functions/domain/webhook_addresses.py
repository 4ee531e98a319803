"""Which IP addresses a webhook may be posted to: public unicast only (deployed), this machine only
(the local stack). Pure: resolving a host name is the ``HostResolver`` port's job.

A webhook URL names its host in many spellings that reach the same address: ``169.254.169.254`` is
also ``2852039166``, ``0251.0376.0251.0376``, ``0xa9.0xfe.0xa9.0xfe``, ``169.254.43518``,
``[::ffff:169.254.169.254]`` or any DNS name whose record points there. So the rule is applied to
the addresses the host RESOLVES to (``socket.getaddrinfo``, which decodes every numeric spelling the
C library's ``inet_aton`` accepts), never to the text of the URL. IPv6 addresses that carry an IPv4
address (IPv4-mapped ``::ffff:0:0/96``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``, Teredo) are
judged by the IPv4 address inside as well. The address classes are the IANA special-purpose
registries as Python's ``ipaddress`` encodes them (``is_global`` and friends).
"""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))


def parse_address(text: str) -> IPAddress | None:
    """An address as ``getaddrinfo`` returns it (an IPv6 one may carry a ``%zone``), or None."""
    try:
        return ipaddress.ip_address(text.split("%", 1)[0].strip("[]"))
    except ValueError:
        return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    found: list[ipaddress.IPv4Address] = []
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)
    if any(address in network for network in _NAT64):
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def _class_of(address: IPAddress) -> str | None:
    """Why ``address`` is not public unicast (None when it is)."""
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        ("not globally reachable", not address.is_global),
    )
    return next((name for name, applies in checks if applies), None)


def non_public_reason(text: str) -> str | None:
    """None when the address ``text`` is public unicast, else why not (``169.254.169.254 is
    link-local``); an unparsable address is refused too.

    Examples: ``0.0.0.0`` unspecified, ``127.0.0.1``/``::1`` loopback, ``10.0.0.5`` private,
    ``169.254.169.254`` link-local, ``224.0.0.1`` multicast, ``240.0.0.1`` reserved,
    ``::ffff:169.254.169.254`` link-local (the IPv4 address inside).
    """
    address = parse_address(text)
    if address is None:
        return f"{text!r} is not an IP address"
    candidates: list[IPAddress] = []
    if isinstance(address, ipaddress.IPv6Address):
        candidates += _embedded_ipv4(address)  # first: the reason names the IPv4 address inside
    if not (isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None):
        # An IPv4-mapped address reaches exactly the IPv4 address inside, judged above.
        candidates.append(address)
    for candidate in candidates:
        problem = _class_of(candidate)
        if problem is not None:
            return f"{candidate} is {problem}"
    return None


def is_this_machine(text: str) -> bool:
    """True for a loopback address (``127.0.0.0/8``, ``::1``, or IPv4-mapped loopback)."""
    address = parse_address(text)
    if address is None:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback
