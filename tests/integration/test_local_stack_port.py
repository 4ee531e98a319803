"""The local stack holds its HTTP port from the start of a start (``stack._reserve_port``): the kernel's
choice of a free port (moto's, while the stack starts) never takes it, a client polling it is refused
at once, and a port a server listens on is refused before any work."""

from __future__ import annotations

import socket

import pytest

from remote_batch_local.stack import PortInUse, _reserve_port


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as finder:
        finder.bind(("127.0.0.1", 0))
        return int(finder.getsockname()[1])


def test_a_reserved_port_is_held_from_free_port_choices_and_refuses_clients_until_released() -> None:
    # Given a port the stack reserved
    port = _free_port()
    reserved = _reserve_port("127.0.0.1", port)
    assert reserved is not None

    # Then it is taken (a bind without SO_REUSEADDR fails; the kernel's free-port choice skips it) and
    # a client is refused at once, not left waiting for an answer
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other, pytest.raises(OSError, match="in use"):
        other.bind(("127.0.0.1", port))
    chosen = []
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as any_port:
            any_port.bind(("127.0.0.1", 0))
            chosen.append(any_port.getsockname()[1])
    assert port not in chosen
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as client, pytest.raises(ConnectionRefusedError):
        client.connect(("127.0.0.1", port))

    # And once released a server binds and listens on it at once
    reserved.close()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen()
        # a port a server listens on is refused to a second stack before any work
        with pytest.raises(PortInUse, match=f"127.0.0.1:{port} is in use"):
            _reserve_port("127.0.0.1", port)
    assert _reserve_port("127.0.0.1", 0) is None
