"""The work product's crossing to the clean room, on crafted archives (what a lying reader could
send): only members that cannot write outside a declared path survive, every other one is counted,
and extracting the rebuilt tar with GNU tar lands nothing outside the declared path."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from swerl.sandbox.runtime.files import spool_archive
from swerl.sandbox.runtime.workproduct import UnreadableWorkProduct, bundle, resolves_inside, write_work_product


def _tar(entries) -> bytes:
    """A tar of ``(name, type, data or link name)`` in the order given (duplicates allowed)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, kind, extra in entries:
            info = tarfile.TarInfo(name)
            info.type = kind
            data = None
            if kind == tarfile.REGTYPE:
                data = extra or b"x"
                info.size, info.mode = len(data), 0o4755
            elif kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                info.linkname = extra
            elif kind == tarfile.DIRTYPE:
                info.mode = 0o755
            tar.addfile(info, io.BytesIO(data) if data else None)
    return buf.getvalue()


def _crossed(archive: bytes, paths=("/app",), rebase: str = ""):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as out:
        stats = write_work_product([(io.BytesIO(archive), rebase)], list(paths), out)
    with tarfile.open(fileobj=io.BytesIO(buf.getvalue())) as got:
        members = [(m.name, m.type, m.linkname, m.mode, m.uid) for m in got]
    return buf.getvalue(), members, stats


def test_forged_link_then_member_below_it_is_dropped_and_counted():
    """The forge found on main: `app -> .` then `app/usr/local/bin/python3` and `app/tests/...`."""
    _, members, stats = _crossed(_tar([
        ("app", tarfile.SYMTYPE, "."), ("app/usr/local/bin/python3", tarfile.REGTYPE, b"#!/bin/sh\nexit 0\n"),
        ("app/tests/test.sh", tarfile.REGTYPE, b"echo 1 > /logs/verifier/reward.txt"),
    ]))
    assert members == []
    assert stats.dropped == {"link_out": 1, "below_link": 2} and stats.members == 0
    assert "3 member(s) dropped" in stats.note()


def test_plain_members_cross_normalized_owned_by_root_without_setuid():
    _, members, stats = _crossed(_tar([
        ("app", tarfile.DIRTYPE, None), ("./app//solution.py", tarfile.REGTYPE, b"ok"),
        ("app/sub", tarfile.DIRTYPE, None), ("app/sub/data.txt", tarfile.REGTYPE, b"123"),
        ("app/hard_ok", tarfile.LNKTYPE, "app/solution.py"), ("app/rel_ok", tarfile.SYMTYPE, "sub/data.txt"),
        ("app/abs_ok", tarfile.SYMTYPE, "/app/sub"), ("app/sub/up_ok", tarfile.SYMTYPE, "../solution.py"),
    ]))
    names = [m[0] for m in members]
    # Folders first (parents before children), then files, hard links, symlinks.
    assert names == ["app", "app/sub", "app/solution.py", "app/sub/data.txt", "app/hard_ok",
                     "app/abs_ok", "app/rel_ok", "app/sub/up_ok"]
    solution = next(m for m in members if m[0] == "app/solution.py")
    assert solution[3] == 0o755 and solution[4] == 0  # setuid bit gone, root's
    assert stats.dropped == {} and stats.file_bytes == 5 and stats.members == 8


@pytest.mark.parametrize(("entries", "reason"), [
    ([("app/x", tarfile.SYMTYPE, "/tests")], "link_out"),
    ([("app/x", tarfile.SYMTYPE, "../tests/test.sh")], "link_out"),
    ([("app/x", tarfile.SYMTYPE, "/")], "link_out"),
    ([("app/x", tarfile.SYMTYPE, "..")], "link_out"),
    ([("app/x", tarfile.SYMTYPE, "../app/solution.py")], "link_out"),  # leaves the path on the way
    ([("app/x", tarfile.LNKTYPE, "etc/passwd")], "link_out"),
    ([("app/x", tarfile.LNKTYPE, "app/missing")], "link_out"),
    ([("app/x", tarfile.FIFOTYPE, None)], "special"),
    ([("app/x", tarfile.CHRTYPE, None)], "special"),
    ([("app/x", tarfile.BLKTYPE, None)], "special"),
    ([("/app/x", tarfile.REGTYPE, None)], "absolute"),
    ([("app/../usr/bin/x", tarfile.REGTYPE, None)], "dotdot"),
    ([("usr/local/bin/pytest", tarfile.REGTYPE, None)], "outside"),
    ([("application", tarfile.REGTYPE, None)], "outside"),
    ([("app/f", tarfile.REGTYPE, None), ("app/f/g", tarfile.REGTYPE, None)], "below_file"),
    ([("app/solution.pyc", tarfile.REGTYPE, None)], "bytecode"),  # a sourceless module
    ([("app/sub.pyo", tarfile.REGTYPE, None)], "bytecode"),
    ([("app/__pycache__", tarfile.SYMTYPE, "sub")], "bytecode"),
])
def test_each_unsafe_member_kind_is_dropped_under_its_reason(entries, reason):
    _, members, stats = _crossed(_tar([("app", tarfile.DIRTYPE, None), *entries]))
    assert stats.dropped == {reason: 1}, stats.dropped
    assert ("app", tarfile.DIRTYPE, "", 0o755, 0) in members


def test_bytecode_caches_never_cross_and_are_counted():
    """An unchecked hash-based pyc beside its bland source would be imported in its place."""
    _, members, stats = _crossed(_tar([
        ("app", tarfile.DIRTYPE, None), ("app/solution.py", tarfile.REGTYPE, b"def f():\n    return 0\n"),
        ("app/__pycache__", tarfile.DIRTYPE, None),
        ("app/__pycache__/solution.cpython-310.pyc", tarfile.REGTYPE, b"\x6f\x0d\x0d\x0a\x03\0\0\0"),
        ("app/pkg/__pycache__/deep/x.py", tarfile.REGTYPE, None),
    ]))
    assert [m[0] for m in members] == ["app", "app/solution.py"]
    assert stats.dropped == {"bytecode": 3}, stats.dropped


def test_a_link_chain_is_followed_through_the_archives_own_links():
    # sub/l -> /app (inside), then app/x -> sub/l/.. : lexically app/sub, but /app/.. is / for the kernel.
    links = {"app/sub/l": "/app", "app/a": "b", "app/b": "a"}
    assert resolves_inside("app/sub/l", "/app", "app", links)
    assert not resolves_inside("app/x", "sub/l/..", "app", links)
    assert resolves_inside("app/x", "sub/l/sub", "app", links)
    assert not resolves_inside("app/x", "a", "app", links)  # a loop: never resolves
    _, members, stats = _crossed(_tar([
        ("app", tarfile.DIRTYPE, None), ("app/sub", tarfile.DIRTYPE, None), ("app/sub/l", tarfile.SYMTYPE, "/app"),
        ("app/x", tarfile.SYMTYPE, "sub/l/.."), ("app/sub/l/evil", tarfile.REGTYPE, None),
    ]))
    assert [m[0] for m in members] == ["app", "app/sub", "app/sub/l"]
    assert stats.dropped == {"link_out": 1, "below_link": 1}


def test_the_last_occurrence_of_a_name_wins_and_decides_what_is_below_it():
    _, members, stats = _crossed(_tar([
        ("app", tarfile.DIRTYPE, None), ("app/d", tarfile.DIRTYPE, None), ("app/d/x", tarfile.REGTYPE, None),
        ("app/d", tarfile.SYMTYPE, "/usr/local/bin"),
    ]))
    assert [m[0] for m in members] == ["app"]
    assert stats.dropped == {"below_link": 1, "link_out": 1}


def test_members_named_from_the_basename_are_rebased_onto_the_declared_path():
    _, members, _ = _crossed(_tar([("app", tarfile.DIRTYPE, None), ("app/f", tarfile.REGTYPE, None),
                                   ("app/h", tarfile.LNKTYPE, "app/f")]), paths=["/srv/app"], rebase="srv/")
    assert [(m[0], m[2]) for m in members] == [("srv/app", ""), ("srv/app/f", ""), ("srv/app/h", "srv/app/f")]


@pytest.mark.parametrize("cut", [700, 1000, 1536])
def test_a_truncated_or_malformed_archive_is_a_typed_error_not_a_crash(cut):
    archive = _tar([("app", tarfile.DIRTYPE, None), ("app/big", tarfile.REGTYPE, b"y" * 4000)])
    with pytest.raises(UnreadableWorkProduct) as caught:
        _crossed(archive[:cut])
    assert caught.value.outcome.value == "copy_out_error"
    with pytest.raises(UnreadableWorkProduct):
        _crossed(b"\x00not a tar at all" * 64)


def test_spool_stops_reading_past_its_limit():
    sent = []

    def stream():
        for i in range(100):
            sent.append(i)
            yield b"z" * 1024

    assert spool_archive(stream(), 10 * 1024) is None and len(sent) == 11
    spool = spool_archive(stream(), 1 << 20)
    assert spool is not None and len(spool.read()) == 100 * 1024


def test_gnu_tar_extracting_the_rebuilt_bundle_writes_nothing_outside_the_declared_path(tmp_path: Path):
    """End to end on the real extractor: a hostile archive, rebuilt, unpacked by GNU tar at a root."""
    hostile = _tar([
        ("app", tarfile.SYMTYPE, "."), ("app/escape", tarfile.REGTYPE, b"out"),
        ("app", tarfile.DIRTYPE, None), ("app/solution.py", tarfile.REGTYPE, b"def f(): return 1\n"),
        ("app/up", tarfile.SYMTYPE, ".."), ("app/up/tests/test.sh", tarfile.REGTYPE, b"echo 1"),
        ("app/lib", tarfile.SYMTYPE, "/usr/lib"), ("app/lib/evil.so", tarfile.REGTYPE, b"x"),
    ])
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("real\n")
    data, stats = bundle(tests, [(io.BytesIO(hostile), "")], ["/app"])
    root = tmp_path / "root"
    root.mkdir()
    subprocess.run(["tar", "-x", "-C", str(root), "-f", "-"], input=data, check=True)
    found = sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))
    # `app` is a folder in the end (the last occurrence wins), so app/escape lies inside it.
    assert found == ["app", "app/escape", "app/solution.py", "tests", "tests/test.sh"]
    assert (root / "tests/test.sh").read_text() == "real\n"
    assert stats.dropped == {"link_out": 2, "below_link": 2}


def _deep_tree(depth: int, files: int) -> bytes:
    """A folder ``depth`` levels deep with ``files`` members at its bottom (the deep-tree attack)."""
    folders = ["app/" + "/".join(["d"] * i) if i else "app" for i in range(depth + 1)]
    bottom = folders[-1]
    return _tar([*((f, tarfile.DIRTYPE, None) for f in folders),
                 *((f"{bottom}/f{i}", tarfile.REGTYPE, b"x") for i in range(files))])


def test_a_deep_tree_is_checked_in_time_linear_in_its_names():
    """Four times the depth (four times the bytes of names) costs about four times the CPU, not
    sixteen: before, each member rebuilt and looked up every folder above it (~13 ms each at the
    bottom of a deep tree, ~10 minutes for ~45,000 members)."""
    import time

    costs = []
    for depth in (300, 1200):
        archive = _deep_tree(depth, 300)
        started = time.process_time()
        _, members, stats = _crossed(archive)
        costs.append(time.process_time() - started)
        assert stats.dropped == {} and len(members) == depth + 1 + 300
    assert costs[1] < 8 * costs[0] + 0.5, costs


def test_member_names_past_the_cap_are_an_unreadable_work_product(monkeypatch):
    from swerl.sandbox.runtime import workproduct

    monkeypatch.setattr(workproduct, "MAX_NAME_BYTES", 4096)
    with pytest.raises(UnreadableWorkProduct, match="member names pass"):
        _crossed(_deep_tree(1000, 1))


def _children_running(module: str) -> list[int]:
    """Pids of this process's children whose command line names ``module``."""
    import os

    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and module.encode() in cmdline:
                found.append(int(entry))
    return found


def test_the_check_in_its_own_process_gives_what_bundle_gives_and_is_killed_at_its_deadline():
    """A check past its deadline raises and leaves no process behind (before, the thread running
    it went on after the deadline and ``sandbox-test`` did not exit)."""
    import asyncio

    from swerl.errors import SandboxTimeout
    from swerl.sandbox.runtime.verification import bundle_by_deadline

    archive = _tar([("app", tarfile.DIRTYPE, None), ("app/solution.py", tarfile.REGTYPE, b"ok"),
                    ("app/__pycache__/x.pyc", tarfile.REGTYPE, b"x")])
    data, stats = asyncio.run(bundle_by_deadline(None, [(io.BytesIO(archive), "")], ["/app"], "", 120))
    expected, expected_stats = bundle(None, [(io.BytesIO(archive), "")], ["/app"])
    assert data == expected and stats.dropped == expected_stats.dropped == {"bytecode": 1}
    chain = [("app", tarfile.DIRTYPE, None), *((f"app/l{i}", tarfile.SYMTYPE, f"l{i + 1}") for i in range(20_000))]
    with pytest.raises(SandboxTimeout, match="its process was killed"):
        asyncio.run(bundle_by_deadline(None, [(io.BytesIO(_tar(chain)), "")], ["/app"], "", 0.2))
    assert _children_running("swerl.sandbox.runtime.workproduct") == []
