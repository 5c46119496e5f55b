"""swerl tasks generate pymethods: determinism, split disjointness, size, and every template's
oracle passing its hidden tests while its stub fails them (the real proxy, without Docker)."""

from __future__ import annotations

import filecmp
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from swerl.cli import app
from swerl.errors import ConfigError, TaskError
from swerl.tasks import load_tasks
from swerl.tasks.generate import FAMILIES, HELDOUT_TEMPLATES, TEMPLATES
from swerl.tasks.generate.plan import plan
from swerl.tasks.generate.pymethods import generate_pymethods
from swerl.tasks.generate.template import render, variant_count
from swerl.tasks.generate.write import task_spec
from swerl.tasks.harness import PROXY, harness_text
from swerl.tasks.pytask import write_pytask


def _same_tree(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    return not mismatch and not errors and all(_same_tree(a / d, b / d) for d in cmp.common_dirs)


def test_catalogue_has_30_templates_in_6_families_and_1000_distinct_tasks():
    assert len(TEMPLATES) >= 30
    assert {t.family for t in TEMPLATES} == set(FAMILIES)
    assert len({t.name for t in TEMPLATES}) == len(TEMPLATES)
    assert HELDOUT_TEMPLATES <= {t.name for t in TEMPLATES}
    assert variant_count(TEMPLATES) >= 1000
    trainable = sum(t.size for t in TEMPLATES if t.name not in HELDOUT_TEMPLATES)
    everything = plan(0, trainable - 48, 48, (1, 2, 3))  # the largest --count
    assert len({i.name for i in everything}) == len(everything) >= 1000
    with pytest.raises(ConfigError, match="--count"):
        plan(0, trainable - 47, 48, (1, 2, 3))


def test_same_seed_same_bytes_other_seed_differs(tmp_path: Path):
    a = tmp_path / "a"
    generate_pymethods(a, seed=3, count=40, heldout_count=6, tiers=(1, 2))
    generate_pymethods(tmp_path / "b", seed=3, count=40, heldout_count=6, tiers=(1, 2))
    generate_pymethods(tmp_path / "c", seed=4, count=40, heldout_count=6, tiers=(1, 2))
    assert _same_tree(a, tmp_path / "b")
    assert not _same_tree(a, tmp_path / "c")
    assert sorted(p.name for p in a.iterdir()) == ["heldout-instance", "heldout-template", "manifest.json", "train"]
    manifest = json.loads((a / "manifest.json").read_text())
    assert {t["tier"] for t in manifest["tasks"]} == {1, 2}
    assert all(re.fullmatch(r"pm-t[12]-[a-z]+-[a-z-]+-\d{4}", t["name"]) for t in manifest["tasks"])
    for split, n in (("train", 40), ("heldout-instance", 6), ("heldout-template", 6)):
        assert len(list((a / split).iterdir())) == n == sum(t["split"] == split for t in manifest["tasks"])


@pytest.mark.parametrize("seed", [0, 1])
def test_splits_are_disjoint_by_template_and_by_instance(seed: int):
    instances = plan(seed, 500, 48, (1, 2, 3))
    by_split = {s: [i for i in instances if i.split == s] for s in ("train", "heldout-instance", "heldout-template")}
    keys = {s: {(i.template.name, i.variant) for i in xs} for s, xs in by_split.items()}
    assert [len(keys[s]) for s in keys] == [500, 48, 48]
    assert not keys["train"] & keys["heldout-instance"]
    assert {t for t, _ in keys["heldout-template"]} == {t for t in HELDOUT_TEMPLATES}
    assert not {t for t, _ in keys["train"] | keys["heldout-instance"]} & HELDOUT_TEMPLATES
    assert {t for t, _ in keys["heldout-instance"]} <= {t for t, _ in keys["train"]}
    # a larger training set only adds tasks; the held-out splits stay
    bigger = plan(seed, 700, 48, (1, 2, 3))
    assert {(i.split, i.name) for i in instances} <= {(i.split, i.name) for i in bigger}


def test_generated_tasks_load_and_name_their_tier(tmp_path: Path):
    generate_pymethods(tmp_path / "out", seed=0, count=30, heldout_count=4, tiers=(1,))
    tasks = load_tasks(tmp_path / "out" / "train", on_error="skip")
    assert len(tasks) == 30 and not tasks.problems
    for task in tasks:
        assert task.name.startswith("pm-t1-")
        toml = (task.path / "task.toml").read_text()
        assert "tier = 1" in toml and "family = " in toml and "template = " in toml
        assert (task.path / "environment" / "solution.py").read_text() in (task.path / "instruction.md").read_text()


def test_cli_writes_and_refuses_bad_arguments(tmp_path: Path):
    runner = CliRunner()
    out = tmp_path / "gen"
    result = runner.invoke(app, ["tasks", "generate", "pymethods", str(out), "--count", "12", "--heldout-count", "3",
                                 "--tiers", "1"])
    assert result.exit_code == 0, result.output
    assert "train: 12 tasks" in result.output
    again = runner.invoke(app, ["tasks", "generate", "pymethods", str(out), "--count", "12"])
    assert isinstance(again.exception, TaskError) and again.exception.exit_code == 2 and "--force" in str(again.exception)
    bad_tier = runner.invoke(app, ["tasks", "generate", "pymethods", str(tmp_path / "x"), "--tiers", "1,4"])
    assert bad_tier.exit_code == 2 and "tiers" in bad_tier.output
    too_many = runner.invoke(app, ["tasks", "generate", "pymethods", str(tmp_path / "y"), "--count", "100000"])
    assert isinstance(too_many.exception, ConfigError) and "--count" in str(too_many.exception)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left


def _junit_outcomes(report: Path) -> dict[str, list[bool]]:
    """Per test file (module name), whether each of its cases passed."""
    outcomes: dict[str, list[bool]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        passed = not any(child.tag in ("failure", "error", "skipped") for child in case)
        outcomes.setdefault(case.get("classname"), []).append(passed)
    return outcomes


def test_every_template_oracle_passes_and_stub_fails_its_hidden_tests(tmp_path: Path):
    """One variant of each template: its hidden tests (through the real solution proxy, in one
    pytest process) pass on the oracle, and some case fails on the stub given to the agent."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / PROXY).write_text(harness_text(PROXY))
    expected: dict[str, int] = {}
    for number, template in enumerate(TEMPLATES):
        spec = task_spec("t", template, (number * 7) % template.size, {})
        task = write_pytask(spec, tmp_path / "tasks" / template.name)
        for role, code in (("oracle", spec.solution_code), ("stub", spec.app_files["solution.py"])):
            module = f"test_{template.name.replace('-', '_')}_{role}"
            app_dir = tmp_path / "apps" / module
            app_dir.mkdir(parents=True)
            (app_dir / "solution.py").write_text(code)
            text = (task / "tests" / "test_solution.py").read_text().replace('"/app"', repr(str(app_dir)))
            (tests / f"{module}.py").write_text(text)
            expected[module] = spec.num_tests
    report = tmp_path / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "--tb=no", "-p", "no:cacheprovider", "--rootdir", str(tests),
                    f"--junitxml={report}", str(tests)], cwd=tests, capture_output=True, timeout=300)
    outcomes = _junit_outcomes(report)
    for module, n in expected.items():
        got = outcomes.get(module, [])
        assert len(got) == n, f"{module}: {len(got)} of {n} cases reported"
        if module.endswith("_oracle"):
            assert all(got), f"{module}: the oracle fails {got.count(False)} case(s)"
        else:
            assert not all(got), f"{module}: the stub passes every case"


def test_rendering_shows_examples_computed_from_the_oracle():
    template = next(t for t in TEMPLATES if t.name == "reverse")
    rendered = render(template, 0)
    assert ">>> reverse_text('abc')\n    'cba'" in rendered.stub
    assert rendered.stub.rstrip().endswith('"""') and "[::-1]" not in rendered.stub  # ends at the docstring
    assert rendered.stub.startswith("def reverse_text(")  # tier 1: the target alone
    assert "return s[::-1]" in rendered.oracle and "# <solution>" not in rendered.oracle
    counter = render(next(t for t in TEMPLATES if t.name == "capitalize-words"), 0)
    assert counter.stub.startswith("def word_count(")  # tier 2: the neighbour before it
