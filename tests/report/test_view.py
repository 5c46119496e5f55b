"""``swerl view``: groups, episodes (reward, advantage, outcome, what the verifier says), then the
conversation turn by turn, for train runs (trajectories/step_N.jsonl) and eval folders."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from swerl.agent.evaluate import write_eval_outputs
from swerl.agent.trajectory import Trajectory
from swerl.cli import app
from swerl.errors import ConfigError
from swerl.report.view import load_episodes, render_terminal
from swerl.report.viewer import render_html
from swerl.trainer.tracking.metrics import dump_trajectories

from trainer._support import save_tiny_model_dir  # tests/ is on sys.path (rootdir-relative packages)


def _episode(task: str, sample: int, reward: float, **extra) -> Trajectory:
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Solve {task}: write <solution.py>"},
        {"role": "assistant", "content": f"print('MAGIC {sample}')"},
    ]
    return Trajectory(task_name=task, group_id=f"{task}-g", sample_index=sample, prompt_ids=[1, 2], response_ids=[3, 4],
                      loss_mask=[1, 1], reward=reward, outcome="passed" if reward else "failed", end_reason="task_complete",
                      num_turns=1, messages=messages, num_policy_tokens=2,
                      verifier_output_tail=f"collected 1 item\n{'1 passed' if reward else '1 failed'} in 0.01s", **extra)


@pytest.fixture
def train_run(tmp_path):
    run = tmp_path / "run"
    trajs = [_episode("magic-a", i, float(i % 2)) for i in range(4)] + [_episode("magic-b", i, 0.0) for i in range(4)]
    dump_trajectories(run, 1, trajs[:4], [0.0] * 4)
    dump_trajectories(run, 2, trajs, [-0.6667, 0.6667, -0.6667, 0.6667, 0.0, 0.0, 0.0, 0.0])
    return run


def test_terminal_view_shows_groups_episodes_and_a_conversation(train_run):
    console = Console(record=True, width=200)
    render_terminal(load_episodes(train_run), console)
    text = console.export_text()
    assert "step 2 (dumped steps: 1, 2), 8 episodes in 2 groups" in text
    assert "magic-a-g" in text and "magic-b-g" in text  # the groups table
    assert "+0.6667" in text and "1 passed in 0.01s" in text  # episode rows: advantage, verifier tail
    # The first episode with a non-zero advantage, turn by turn.
    assert text.index("[0] system") < text.index("[1] user") < text.index("[2] assistant")
    assert "print('MAGIC 0')" in text and "Solve magic-a" in text


def test_task_and_sample_pick_the_conversation(train_run):
    console = Console(record=True, width=200)
    render_terminal(load_episodes(train_run, step=2), console, task="magic-b", sample=3)
    text = console.export_text()
    assert "magic-b sample 3" in text and "print('MAGIC 3')" in text and "magic-a sample" not in text
    with pytest.raises(ConfigError, match="^--task nope: no such task here; known tasks: magic-a, magic-b$"):
        render_terminal(load_episodes(train_run), console, task="nope")
    with pytest.raises(ConfigError, match=r"^--task magic-c: no such task here; did you mean 'magic-[ab]'\?$"):
        render_terminal(load_episodes(train_run), console, task="magic-c")
    with pytest.raises(ConfigError, match="^--task magic-b --sample 9: no such sample; magic-b has samples 0, 1, 2, 3$"):
        render_terminal(load_episodes(train_run), console, task="magic-b", sample=9)


def test_unknown_step_names_the_steps_there(train_run):
    with pytest.raises(ConfigError, match="has steps 1, 2"):
        load_episodes(train_run, step=7)


def test_a_run_without_dumps_says_how_to_get_them(tmp_path):
    with pytest.raises(ConfigError, match="logging.dump_trajectories"):
        load_episodes(tmp_path)


def test_a_missing_folder_is_named_as_missing(tmp_path):
    with pytest.raises(ConfigError, match=r"/nope does not exist: pass the run directory"):
        load_episodes(tmp_path / "nope")


def test_eval_output_folder_is_viewed_with_its_summary(tmp_path):
    trajs = [_episode("humaneval-000", i, float(i == 0)) for i in range(2)]
    write_eval_outputs(tmp_path, trajs, {"pass@1": 0.5, "reward/mean": 0.5})
    eps = load_episodes(tmp_path)
    assert eps.kind == "eval" and [e.advantage for e in eps.episodes] == [None, None]
    console = Console(record=True, width=200)
    render_terminal(eps, console)
    text = console.export_text()
    assert "pass@1: 0.5000" in text and "print('MAGIC 0')" in text
    page = render_html(eps)  # the HTML viewer of an eval folder: its summary, every episode
    assert "pass@1: 0.5000" in page and page.count('"task": "humaneval-000"') == 2


def test_html_viewer_holds_every_step_and_conversation_escaped(train_run, tmp_path):
    out = tmp_path / "view.html"
    result = CliRunner().invoke(app, ["view", str(train_run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert "steps 1, 2, 12 episodes in 3 groups" in page  # both dumped steps (groups by id: magic-a-g twice)
    assert "print('MAGIC 3')" in page and "Solve magic-b: write <solution.py>" in page  # JSON data
    assert "</solution" not in page.split('id="episodes">', 1)[1].split("</script>", 1)[0]  # cannot close the script
    one = tmp_path / "step2.html"
    assert CliRunner().invoke(app, ["view", str(train_run), "--step", "2", "--out", str(one)]).exit_code == 0
    assert "step 2 (dumped steps: 1, 2), 8 episodes" in one.read_text()


def test_records_without_a_transcript_are_decoded_with_the_runs_tokenizer(tmp_path):
    model_dir = save_tiny_model_dir(tmp_path / "model")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"model": {"path": str(model_dir)}}))
    prompt = tok.encode("Write answer", add_special_tokens=False)
    gen, obs = tok.encode("print( MAGIC )", add_special_tokens=False), tok.encode("pass", add_special_tokens=False)
    traj = Trajectory(task_name="t", group_id="g", prompt_ids=prompt, response_ids=gen + obs,
                      loss_mask=[1] * len(gen) + [0] * len(obs))
    dump_trajectories(run, 1, [traj], [0.0])
    (episode,) = load_episodes(run).episodes
    assert [m["role"] for m in episode.messages] == ["prompt", "assistant", "observation"]
    assert "MAGIC" in episode.messages[1]["content"] and "pass" in episode.messages[2]["content"]
    assert "MAGIC" in render_html(load_episodes(run))


def test_a_real_training_dump_reads_as_a_conversation():
    run = Path(__file__).parent / "fixtures" / "arm-seqnorm-notis"
    eps = load_episodes(run, step=9)
    assert eps.steps_available == [9, 10] and len(eps.episodes) == 8
    console = Console(record=True, width=160)
    render_terminal(eps, console)
    text = console.export_text()
    assert "Write MAGIC into `/app/solution.py`" in text and "[2] assistant" in text


PYTEST_COLLECTION_ERROR = """============================= test session starts ==============================
collecting ... collected 0 items / 1 error
==================================== ERRORS ====================================
______________________ ERROR collecting test_solution.py _______________________
/tests/test_solution.py:6: in <module>
    from solution import has_close_elements  # noqa: E402
E   ModuleNotFoundError: No module named 'solution'
=========================== short test summary info ============================
ERROR ../tests/test_solution.py
!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!
=============================== 1 error in 0.05s ==============================="""
PYTEST_ASSERTION = """=================================== FAILURES ===================================
>       assert candidate([1.0, 2.0, 3.9], 0.3) == True
E       assert False == True
E        +  where False = has_close_elements([1.0, 2.0, 3.9], 0.3)
=========================== short test summary info ============================
FAILED test_solution.py::test_check - assert False == True
============================== 1 failed in 0.03s ==============================="""


@pytest.mark.parametrize("tail, detail, says", [
    (PYTEST_COLLECTION_ERROR, "reward 0 (test.sh exit 2)", "ModuleNotFoundError: No module named 'solution'"),
    (PYTEST_ASSERTION, "", "assert False == True"),
    ("FAILED t.py::test_x - IndexError: list index out of range\n==== 1 failed in 0.1s ====", "",
     "IndexError: list index out of range"),
    ("collected 1 item\n========== 1 passed in 0.01s ==========", "", "1 passed in 0.01s"),
    ("", "sandbox failed: container OOM-killed (exit 137)", "sandbox failed: container OOM-killed (exit 137)"),
    ("E   " + "x" * 200, "", "x" * 79 + "…"),
], ids=["collection-error", "assertion", "summary-line", "passed", "no-output", "long"])
def test_verifier_column_says_what_went_wrong(tail, detail, says):
    from swerl.report.view import verifier_reason

    assert verifier_reason(tail, detail) == says


def test_the_episode_table_shows_the_verifiers_error_not_its_banner(tmp_path):
    run = tmp_path / "run"
    broken = _episode("humaneval-000", 0, 0.0).model_copy(update={"verifier_output_tail": PYTEST_COLLECTION_ERROR})
    dump_trajectories(run, 1, [broken], [0.0])
    console = Console(record=True, width=250)
    render_terminal(load_episodes(run), console)
    text = console.export_text()
    (row,) = [line for line in text.splitlines() if line.lstrip("│┃ ").startswith("humaneval-000 ")]
    assert "verifier says" in text and "ModuleNotFoundError: No module named 'solution'" in row
    assert "ModuleNotFoundError: No module named 'solution'" in render_html(load_episodes(run)).replace("&#x27;", "'")


def test_tamper_reasons_show_in_the_episode_table_the_conversation_and_the_page(tmp_path):
    reasons = ["logs: added /logs/verifier", "reward: wrote /logs/verifier/reward.txt"]
    trajs = [_episode("magic-a", 0, 1.0, tamper=reasons), _episode("magic-a", 1, 0.0)]
    dump_trajectories(tmp_path, 1, trajs, [0.5, -0.5])
    console = Console(record=True, width=220)
    render_terminal(load_episodes(tmp_path), console, task="magic-a", sample=0)
    text = console.export_text()
    assert "2: logs" in text and "1 episode of 2 touched the verifier's territory" in text
    assert "reward: wrote /logs/verifier/reward.txt" in text  # the panel under the conversation
    page = render_html(load_episodes(tmp_path))
    assert page.count("added /logs/verifier") == 1 and page.count('"tamper": true') == 1  # one flagged row, its reasons
