"""``HostResolver`` on the C library's resolver (``socket.getaddrinfo``)."""

from __future__ import annotations

import socket


class SocketResolver:
    """Resolves host names and every numeric spelling ``getaddrinfo`` accepts (``2852039166``,
    ``0xa9.0xfe.0xa9.0xfe``, ``[::ffff:a9fe:a9fe]``) to the addresses a connection would use."""

    def resolve(self, host: str, port: int) -> list[str]:
        """Every address of ``host`` (IPv4 and IPv6, deduplicated, in resolver order); [] when it
        does not resolve."""
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError, OSError):
            return []
        return list(dict.fromkeys(str(info[4][0]) for info in infos))
