"""Unit tests reach no network: the domain and the pure parts are tested without AWS or moto."""

from __future__ import annotations

import pytest
from pytest_socket import disable_socket, enable_socket


@pytest.fixture(autouse=True)
def _no_network():
    disable_socket(allow_unix_socket=True)
    yield
    enable_socket()
