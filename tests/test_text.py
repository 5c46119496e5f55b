"""swerl.text.counted: a count with its noun in the right number."""

from swerl.text import counted


def test_one_is_singular_and_every_other_count_plural():
    assert [counted(n, "step") for n in (0, 1, 2)] == ["0 steps", "1 step", "2 steps"]
    assert counted(1, "process", "processes") == "1 process" and counted(3, "process", "processes") == "3 processes"
