"""Templates of the dicts family: look-ups, counts, merges and groupings."""

from __future__ import annotations

from swerl.tasks.generate import inputs as gen
from swerl.tasks.generate.template import Template


def _prices(rng, low=0, high=5) -> dict:
    return {w: rng.randint(0, 20) for w in gen.names(rng, rng.randint(low, high))}


LOOKUP = Template(
    name="lookup-default", family="dicts", tier=1,
    axes={"fn": ("lookup", "get_or_default", "find_value"), "default": ("0", "None", "-1", "'missing'"),
          "table": ("table", "mapping", "prices")},
    source='''\
def has_key(d: dict, key) -> bool:
    """Return True when key is a key of d."""
    return key in d


def ${fn}(${table}: dict, key):
    """Return the value stored under key in ${table}, or ${default} when key is not there.

    ${examples}
    """
    # <solution>
    return ${table}.get(key, ${default})
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [({"a": 1, "b": 2}, "b"), ({"a": 1}, "z")],
    cases=lambda rng, p: [({}, "a"), ({"a": 0}, "a"), ({"a": None}, "a"), ({"x": 1}, "y")]
    + [(d, rng.choice(list(d) + ["nope"])) for d in (_prices(rng, 1, 5), _prices(rng, 1, 5))],
)

INVERT = Template(
    name="invert", family="dicts", tier=2,
    axes={"fn": ("invert", "swap_keys_values", "reverse_mapping"), "clash": ("first", "last"),
          "arg": ("mapping", "d", "codes")},
    source='''\
def keys_of(d: dict) -> list:
    """Return the keys of d as a sorted list."""
    return sorted(d)


def ${fn}(${arg}: dict) -> dict:
    """Return a new dict mapping each value of ${arg} to its key. When several keys share a value,
    keep the key that comes ${clash} in ${arg}'s order.

    ${examples}
    """
    # <solution>
    out = {}
    for key, value in ${arg}.items():
        if "${clash}" == "last" or value not in out:
            out[value] = key
    return out
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [({"a": 1, "b": 2},), ({"x": 0, "y": 0},)],
    cases=lambda rng, p: [({},), ({"k": "v"},), ({"a": 1, "b": 1, "c": 2},),
                          ({w: rng.randint(0, 3) for w in gen.names(rng, 5)},),
                          ({w: w[::-1] for w in gen.names(rng, 3)},)],
)

WORD_COUNT = Template(
    name="word-count", family="dicts", tier=2,
    axes={"fn": ("word_count", "count_words", "word_frequencies"), "case": ("ignoring case", "case-sensitive"),
          "arg": ("text", "s")},
    source='''\
def words(s: str) -> list:
    """Return the whitespace-separated words of s."""
    return s.split()


def ${fn}(${arg}: str) -> dict:
    """Count the whitespace-separated words of ${arg} (${case}): return a dict from each word to
    its number of occurrences.${note}

    ${examples}
    """
    # <solution>
    counts = {}
    for w in ${arg}.split():
        key = w.lower() if "${case}" == "ignoring case" else w
        counts[key] = counts.get(key, 0) + 1
    return counts
    # </solution>
''',
    target="${fn}",
    derive=lambda p: {"note": " Words are counted in lower case." if p["case"] == "ignoring case" else ""},
    examples=lambda p: [("the cat The dog",)],
    cases=lambda rng, p: [("",), ("a",), ("A a",), ("x  y\tx",), (gen.text(rng, 3, 8),),
                          (" ".join(w.capitalize() if rng.random() < 0.5 else w for w in gen.words(rng, 3, 8)),)],
)

MERGE_SUM = Template(
    name="merge-sum", family="dicts", tier=2,
    axes={"fn": ("merge_sum", "combine_counts", "add_tallies"), "op": ("added", "multiplied"),
          "names": ("a, b", "left, right", "first, second")},
    source='''\
def total(d: dict) -> int:
    """Return the sum of the values of d."""
    return sum(d.values())


def ${fn}(${names}) -> dict:
    """Merge two dicts of numbers into a new one: a key found in only one of them keeps its
    value; a key in both gets the two values ${op}. Neither input changes.

    ${examples}
    """
    # <solution>
    x, y = ${names}
    out = dict(x)
    for key, value in y.items():
        out[key] = (out[key] + value if "${op}" == "added" else out[key] * value) if key in out else value
    return out
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [({"a": 2, "b": 3}, {"b": 4, "c": 1})],
    cases=lambda rng, p: [({}, {}), ({"a": 1}, {}), ({}, {"a": 2}), ({"a": 3}, {"a": 5}),
                          (_prices(rng, 2, 5), _prices(rng, 2, 5)), (_prices(rng, 2, 5), _prices(rng, 2, 5))],
)

GROUP_BY = Template(
    name="group-by", family="dicts", tier=3,
    axes={"fn": ("group_words", "group_by_key", "bucket"), "key": ("first letter", "length"),
          "arg": ("words", "items")},
    source='''\
def longest(words: list) -> str:
    """Return the longest word of a non-empty list (the first one on ties)."""
    return max(words, key=len)


def ${fn}(${arg}: list) -> dict:
    """Group the words in ${arg} by their ${key}: return a dict from each ${key} to the list of
    words that have it, in their order in ${arg}. Empty strings are skipped.

    ${examples}
    """
    # <solution>
    groups = {}
    for w in ${arg}:
        if w:
            groups.setdefault(w[0] if "${key}" == "first letter" else len(w), []).append(w)
    return groups
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [(["ant", "bee", "ape", "cow"],)],
    cases=lambda rng, p: [([],), ([""],), (["a"],), (gen.words(rng, 3, 8),), (gen.words(rng, 3, 8) + ["", "ab"],)],
)

TEMPLATES = [LOOKUP, INVERT, WORD_COUNT, MERGE_SUM, GROUP_BY]
