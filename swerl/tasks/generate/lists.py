"""Templates of the lists family: a list in, a number, an item or a new list out."""

from __future__ import annotations

from swerl.tasks.generate import inputs as gen
from swerl.tasks.generate.template import Template

_PREDICATES = {"even": "x % 2 == 0", "odd": "x % 2 == 1", "negative": "x < 0", "positive": "x > 0"}

SUM_ABOVE = Template(
    name="sum-above", family="lists", tier=1,
    axes={"fn": ("sum_above", "total_over", "sum_greater"), "k": ("0", "1", "5", "10", "-3"),
          "arg": ("numbers", "xs", "values"), "num": ("int", "float")},
    source='''\
def count_items(xs: list) -> int:
    """Return the number of items in xs."""
    return len(xs)


def ${fn}(${arg}: list[${num}]) -> ${num}:
    """Return the sum of the numbers in ${arg} that are greater than ${k} (0 when there are none).

    ${examples}
    """
    # <solution>
    return sum(x for x in ${arg} if x > ${k})
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [(_numbers(p, [int(p["k"]) - 1, int(p["k"]) + 2, int(p["k"]) + 5]),), ([],)],
    cases=lambda rng, p: [([],), (_numbers(p, [int(p["k"])]),), (_numbers(p, [int(p["k"]) + 1]),),
                          (_numbers(p, gen.ints(rng, 3, 8)),), (_numbers(p, gen.ints(rng, 3, 8)),),
                          (_numbers(p, [-50, 50]),)],
)


def _numbers(params: dict, ints: list[int]) -> list:
    """``ints`` as the variant's number type (floats: each plus 0.5)."""
    return ints if params["num"] == "int" else [x + 0.5 for x in ints]


COUNT_MATCHING = Template(
    name="count-matching", family="lists", tier=1,
    axes={"fn": ("count_matching", "how_many", "tally_numbers"), "pred": tuple(_PREDICATES),
          "arg": ("numbers", "xs", "items")},
    source='''\
def largest(xs: list) -> int:
    """Return the largest number in xs (xs is not empty)."""
    return max(xs)


def ${fn}(${arg}: list) -> int:
    """Return how many numbers in ${arg} are ${pred}.

    ${examples}
    """
    # <solution>
    return sum(1 for x in ${arg} if ${cond})
    # </solution>
''',
    target="${fn}",
    derive=lambda p: {"cond": _PREDICATES[p["pred"]]},
    examples=lambda p: [([1, 2, 3, -4],), ([],)],
    cases=lambda rng, p: [([],), ([0],), ([7],), ([-7],), (gen.ints(rng, 4, 9),), (gen.ints(rng, 4, 9),)],
)

LAST_OR_DEFAULT = Template(
    name="last-or-default", family="lists", tier=1,
    axes={"fn": ("last_or_default", "final_item", "last_element"), "default": ("None", "0", "-1", "''"),
          "arg": ("items", "xs", "seq")},
    source='''\
def first_or_none(xs: list):
    """Return the first item of xs, or None when xs is empty."""
    return xs[0] if xs else None


def ${fn}(${arg}: list):
    """Return the last item of ${arg}, or ${default} when ${arg} is empty.

    ${examples}
    """
    # <solution>
    return ${arg}[-1] if ${arg} else ${default}
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [([3, 1, 2],), ([],)],
    cases=lambda rng, p: [([],), ([5],), (["a", "b"],), (gen.ints(rng, 2, 6),), (gen.words(rng),), ([None, 0],)],
)

DEDUPE = Template(
    name="dedupe", family="lists", tier=2,
    axes={"fn": ("dedupe", "unique_in_order", "drop_duplicates"), "kind": ("int", "str"),
          "keep": ("first", "last"), "arg": ("items", "xs")},
    source='''\
def contains(xs: list, item) -> bool:
    """Return True when item is in xs."""
    return item in xs


def ${fn}(${arg}: list[${kind}]) -> list[${kind}]:
    """Return the items of ${arg} without repeats. Each item is kept at the position of its ${keep}
    occurrence; the order of the kept items is the order of those positions.

    ${examples}
    """
    # <solution>
    if "${keep}" == "first":
        seen, out = set(), []
        for x in ${arg}:
            if x not in seen:
                seen.add(x)
                out.append(x)
        return out
    last = {x: i for i, x in enumerate(${arg})}
    return [x for i, x in enumerate(${arg}) if last[x] == i]
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [([3, 1, 3, 2, 1],) if p["kind"] == "int" else (["b", "a", "b", "c", "a"],)],
    cases=lambda rng, p: [([],)] + [
        ((gen.ints(rng, 3, 10, 0, 4) if p["kind"] == "int" else [gen.letters(rng, "abc", 1, 1) for _ in range(rng.randint(3, 10))]),)
        for _ in range(4)] + [([7, 7, 7],) if p["kind"] == "int" else (["x", "x"],)],
)

SECOND_LARGEST = Template(
    name="second-largest", family="lists", tier=2,
    axes={"fn": ("second_largest", "runner_up", "next_biggest"), "missing": ("None", "-1"),
          "arg": ("numbers", "xs", "scores")},
    source='''\
def smallest(xs: list) -> int:
    """Return the smallest number in xs (xs is not empty)."""
    return min(xs)


def ${fn}(${arg}: list[int]):
    """Return the second largest distinct number in ${arg}, or ${missing} when ${arg} has
    fewer than two distinct numbers.

    ${examples}
    """
    # <solution>
    distinct = sorted(set(${arg}))
    return distinct[-2] if len(distinct) >= 2 else ${missing}
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [([4, 9, 2, 9],), ([5],)],
    cases=lambda rng, p: [([],), ([3],), ([3, 3],), ([1, 2],), ([2, 1, 2],), (gen.ints(rng, 3, 9),),
                          (gen.ints(rng, 3, 9, lo=-30, hi=-1),)],
)

CHUNKS = Template(
    name="chunks", family="lists", tier=2,
    axes={"fn": ("chunks", "split_every", "batch"), "size": ("2", "3", "4"), "arg": ("items", "xs")},
    source='''\
def flatten(groups: list) -> list:
    """Return the items of a list of lists, in order, as one list."""
    return [x for group in groups for x in group]


def ${fn}(${arg}: list) -> list:
    """Split ${arg} into consecutive lists of ${size} items; the last one may be shorter.
    An empty list gives an empty list.

    ${examples}
    """
    # <solution>
    return [${arg}[i:i + ${size}] for i in range(0, len(${arg}), ${size})]
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [(list(range(1, int(p["size"]) * 2 + 2)),)],
    cases=lambda rng, p: [([],), ([1],), (list(range(int(p["size"]))),), (gen.ints(rng, 5, 11),), (gen.words(rng, 3, 9),)],
)

TEMPLATES = [SUM_ABOVE, COUNT_MATCHING, LAST_OR_DEFAULT, DEDUPE, SECOND_LARGEST, CHUNKS]
