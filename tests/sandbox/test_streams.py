"""Output capping keeps head and tail, counts the dropped bytes, decodes with replacement."""

from __future__ import annotations

from swerl.sandbox.runtime.streams import CappedOutput


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
