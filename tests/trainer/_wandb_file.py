"""Read back a W&B offline run file (``run-<id>.wandb``): the LevelDB log format (7-byte file
header, 32 KiB blocks, records of crc32 + length + type) holding ``wandb_internal_pb2.Record``s."""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def _payloads(data: bytes):
    assert data[:4] == b":W&B", "not a W&B datastore file"
    pos, chunk = 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # block trailer padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        body = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == FULL:
            yield body
        elif kind == FIRST:
            chunk = body
        elif kind == MIDDLE:
            chunk += body
        elif kind == LAST:
            yield chunk + body
        else:
            break


def _items(items) -> dict:
    return {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in items}


def read_wandb_run(path: Path) -> dict:
    """{"history": [{key: value, "_step": n}], "config": {...}, "summary": {...}} of one file."""
    from wandb.proto import wandb_internal_pb2 as pb

    out: dict = {"history": [], "config": {}, "summary": {}}
    for payload in _payloads(path.read_bytes()):
        record = pb.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            out["history"].append(_items(record.history.item))
        elif kind == "config":
            out["config"].update(_items(record.config.update))
        elif kind == "summary":
            out["summary"].update(_items(record.summary.update))
        elif kind == "run":
            out["config"].update(_items(record.run.config.update))
    return out
