"""swerl.text.counted: a count with its noun in the right number."""

from swerl.text import counted


def test_one_is_singular_and_every_other_count_plural():
    assert [counted(n, "step") for n in (0, 1, 2)] == ["0 steps", "1 step", "2 steps"]
    assert counted(1, "process", "processes") == "1 process" and counted(3, "process", "processes") == "3 processes"


def test_did_you_mean_names_the_closest_else_lists_a_few():
    from swerl.text import did_you_mean

    assert did_you_mean("lrr", ["lr", "grad_clip"]) == "did you mean 'lr'?"
    assert did_you_mean("zzz", ["a", "b", "c"], listed=2, what="tasks") == "known tasks: a, b (+1 more)"
