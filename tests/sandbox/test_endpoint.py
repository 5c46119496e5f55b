"""An engine URL parses to the socket it names (unix, tcp, TLS); an unknown scheme is refused."""

from __future__ import annotations

import pytest

from swerl.errors import SandboxError
from swerl.sandbox.endpoint import Endpoint


def test_endpoint_of_an_engine_url_names_its_own_socket_whatever_docker_host_says(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/elsewhere.sock")
    assert (Endpoint.of("unix:///run/x.sock", "1.41").kind, Endpoint.of("unix:///run/x.sock", "1.41").address) == (
        "unix", "/run/x.sock")
    tcp = Endpoint.of("tcp://10.0.0.5:2375", "1.41")
    assert (tcp.kind, tcp.address, tcp.ssl) == ("tcp", "10.0.0.5:2375", None)
    tls = Endpoint.of("https://10.0.0.5", "1.41")
    assert tls.address == "10.0.0.5:2376" and tls.ssl is not None


def test_endpoint_rejects_an_unknown_scheme():
    with pytest.raises(SandboxError, match="unsupported Docker endpoint"):
        Endpoint.of("ssh://user@host", "1.41")
