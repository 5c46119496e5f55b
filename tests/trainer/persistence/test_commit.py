"""The step commit protocol on real files: commit order, and what a resume does with the files a
``kill -9`` left at each point (stale temp folders, records and exports of uncommitted steps,
a committed record that never reached metrics.jsonl). The kills themselves, on the real loop,
are in test_resume_kill.py."""

from __future__ import annotations

import json
from pathlib import Path

from swerl.trainer.persistence import commit
from swerl.trainer.tracking.metrics import make_record


def write_metrics(run_dir: Path, steps: list[int], torn: bool = False) -> None:
    lines = "".join(json.dumps(make_record(s, {"reward/avg_raw_reward": s / 10})) + "\n" for s in steps)
    (run_dir / "metrics.jsonl").write_text(lines + ('{"global_step": 9, "rew' if torn else ""))


def logged_steps(run_dir: Path) -> list[int]:
    return [json.loads(line)["global_step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def make_exports(run_dir: Path, steps: list[int], tmp_step: int | None = None) -> None:
    for s in steps:
        (run_dir / "exports" / f"global_step_{s}").mkdir(parents=True)
        (run_dir / "exports" / f"global_step_{s}" / "model.safetensors").write_bytes(b"w")
    if tmp_step is not None:
        (run_dir / "exports" / f".tmp-global_step_{tmp_step}").mkdir(parents=True)


def test_commit_order_is_export_then_checkpoint_holding_the_record_then_metrics():
    calls: list[tuple] = []
    record = commit.commit_step(
        3, {"loss/policy": 0.5}, 0.0,
        export=lambda: calls.append(("export",)),
        checkpoint=lambda recs: calls.append(("checkpoint", recs)),
        append=lambda rec: calls.append(("append", rec)),
    )
    assert [c[0] for c in calls] == ["export", "checkpoint", "append"]
    assert calls[1][1] == [record] and calls[2][1] is record  # the stored record is the appended one
    assert list(record)[0] == "global_step" and record["global_step"] == 3
    assert {"timing/export_s", "timing/step_s", "loss/policy"} <= set(record)


def test_resume_drops_uncommitted_records_exports_and_stale_temps(tmp_path):
    # Checkpoint 2 is the last commit; step 3 logged and exported (no checkpoint), step 4 mid-export.
    write_metrics(tmp_path, [1, 2, 3], torn=True)
    make_exports(tmp_path, [1, 2, 3], tmp_step=4)
    (tmp_path / "checkpoints" / ".tmp-global_step_4").mkdir(parents=True)  # an older kill mid-save
    state = {"global_step": 2, commit.RECORDS_KEY: [make_record(2, {"reward/avg_raw_reward": 0.2})]}
    assert commit.reconcile_run(tmp_path, state, redo_after=True) == []
    assert logged_steps(tmp_path) == [1, 2]
    assert sorted(p.name for p in (tmp_path / "exports").iterdir()) == ["global_step_1", "global_step_2"]
    assert not list(tmp_path.glob("*/.tmp-*"))


def test_resume_restores_a_committed_record_missing_from_metrics(tmp_path):
    # Killed after checkpoint 2 landed, before its record was appended.
    write_metrics(tmp_path, [1])
    stored = make_record(2, {"reward/avg_raw_reward": 0.25, "timing/step_s": 1.5})
    restored = commit.reconcile_run(tmp_path, {"global_step": 2, commit.RECORDS_KEY: [stored]}, redo_after=False)
    assert restored == [stored]
    assert logged_steps(tmp_path) == [1, 2]
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[1]) == stored


def test_a_consistent_run_is_left_byte_for_byte(tmp_path):
    write_metrics(tmp_path, [1, 2])
    make_exports(tmp_path, [1, 2])
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.rglob("*") if p.is_file()}
    state = {"global_step": 2, commit.RECORDS_KEY: [make_record(2, {"reward/avg_raw_reward": 0.2})]}
    for redo_after in (True, False):
        assert commit.reconcile_run(tmp_path, state, redo_after=redo_after) == []
    after = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before


def test_a_resume_before_the_first_checkpoint_starts_clean(tmp_path):
    write_metrics(tmp_path, [1])  # step 1 logged and exported, killed before the first checkpoint
    make_exports(tmp_path, [1], tmp_step=2)
    commit.reconcile_run(tmp_path, {"global_step": 0}, redo_after=True)
    assert (tmp_path / "metrics.jsonl").read_text() == ""
    assert not list((tmp_path / "exports").iterdir())
