"""The local stack holds its HTTP port from the start of a start (``stack._reserve_port``): nothing else
binds it meanwhile, not even moto's own choice of a free port on a restart just after a crash."""

from __future__ import annotations

import socket

import pytest

from remote_batch_local.stack import PortInUse, _reserve_port


def _bind(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", port))


def test_a_reserved_port_cannot_be_bound_until_it_is_released() -> None:
    # Given a port the stack reserved (a free one, found as the stack's own tests find theirs)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as finder:
        finder.bind(("127.0.0.1", 0))
        port = finder.getsockname()[1]
    reserved = _reserve_port("127.0.0.1", port)
    assert reserved is not None

    # Then nothing else binds it, even with SO_REUSEADDR as servers set it, and a second stack is told
    with pytest.raises(OSError, match="Address already in use"):
        _bind(port)
    with pytest.raises(PortInUse, match=f"127.0.0.1:{port} is in use"):
        _reserve_port("127.0.0.1", port)

    # And once released the gateway binds it at once
    reserved.close()
    _bind(port)
    assert _reserve_port("127.0.0.1", 0) is None
