"""A loopback port where every connection is refused, for a test (``pytest_plugins =
["tests.ports"]``): a socket bound and not listening, held for the test, so that no
other process binds its port meanwhile, as one could a port found free and let go."""

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def refusing_socket() -> Iterator[socket.socket]:
    """The socket itself: a server of the test's may listen on it later."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held


@pytest.fixture
def refused_port(refusing_socket) -> int:
    return refusing_socket.getsockname()[1]
