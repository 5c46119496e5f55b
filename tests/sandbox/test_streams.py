"""Output capping keeps head and tail, counts the dropped bytes, decodes with replacement."""

from __future__ import annotations

import pytest

from swerl.errors import SandboxError
from swerl.sandbox.runtime.streams import CappedOutput, Endpoint


def test_small_output_is_kept_whole():
    sink = CappedOutput(100)
    sink.add(b"hello ")
    sink.add(b"world")
    assert sink.text() == "hello world" and sink.dropped == 0


def test_large_output_keeps_head_and_tail_and_counts_the_middle():
    sink = CappedOutput(10)
    for i in range(100):
        sink.add(bytes([65 + i % 26]) * 10)  # 1000 bytes in 10-byte chunks
    assert sink.dropped == 990
    assert sink.head == bytearray(b"AAAAA") and sink.tail == bytearray(b"VVVVV")
    assert "[... 990 bytes truncated ...]" in sink.text()


def test_invalid_utf8_is_replaced_not_raised():
    sink = CappedOutput(1000)
    sink.add(b"ok \xff\xfe\xc3( end")
    assert sink.text() == "ok \ufffd\ufffd\ufffd( end"


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
