"""Templates of the strings family: text in, text or a number out."""

from __future__ import annotations

from swerl.tasks.generate import inputs as gen
from swerl.tasks.generate.template import Template

REVERSE = Template(
    name="reverse", family="strings", tier=1,
    axes={"fn": ("reverse_text", "reversed_string", "flip", "backwards"), "arg": ("s", "text", "word")},
    source='''\
def shout(s: str) -> str:
    """Return s in capitals followed by an exclamation mark."""
    return s.upper() + "!"


def ${fn}(${arg}: str) -> str:
    """Return ${arg} with its characters in reverse order.

    ${examples}
    """
    # <solution>
    return ${arg}[::-1]
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [("abc",), ("hello world",)],
    cases=lambda rng, p: [("",), ("a",), ("ab",), (gen.text(rng),), (gen.word(rng),), ("racecar",), ("A b!",)],
)

COUNT_CHAR = Template(
    name="count-char", family="strings", tier=1,
    axes={"fn": ("count_char", "occurrences", "tally"), "ch": ("a", "e", "o", "s", "-", "."),
          "arg": ("text", "s")},
    source='''\
def is_blank(s: str) -> bool:
    """Return True when s is empty or only whitespace."""
    return s.strip() == ""


def ${fn}(${arg}: str) -> int:
    """Return how many times the character '${ch}' occurs in ${arg}.

    ${examples}
    """
    # <solution>
    return ${arg}.count("${ch}")
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [(f"x{p['ch']}y{p['ch']}",), ("bcd",)],
    cases=lambda rng, p: [("",), (p["ch"],), (p["ch"] * 3,), (gen.text(rng, 2, 6),), (gen.text(rng, 2, 6),),
                          (f"{p['ch']}-{p['ch']}.{p['ch']}{gen.word(rng)}",), (p["ch"].upper() + "z",)],
)

REPEAT = Template(
    name="repeat-joined", family="strings", tier=1,
    axes={"fn": ("repeat", "repeat_joined", "echo"), "sep": ("-", ", ", " ", "|", "+"), "count": ("n", "times")},
    source='''\
def first_char(s: str) -> str:
    """Return the first character of s, or an empty string when s is empty."""
    return s[:1]


def ${fn}(s: str, ${count}: int) -> str:
    """Return ${count} copies of s joined by "${sep}" (an empty string when ${count} is 0).

    ${examples}
    """
    # <solution>
    return "${sep}".join([s] * ${count})
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [("ab", 3), ("x", 1)],
    cases=lambda rng, p: [("a", 0), ("a", 1), ("ab", 2), (gen.word(rng), 3), (gen.word(rng), rng.randint(4, 6)),
                          ("", 3)],
)

CAPITALIZE = Template(
    name="capitalize-words", family="strings", tier=2,
    axes={"fn": ("capitalize_words", "title_words", "cap_each"), "case": ("upper", "lower"), "arg": ("text", "s")},
    source='''\
def word_count(s: str) -> int:
    """Return how many space-separated words s holds."""
    return len(s.split())


def ${fn}(${arg}: str) -> str:
    """Return ${arg} with the first letter of every word changed to ${case} case.

    Words are separated by single spaces; everything else stays as it is.

    ${examples}
    """
    # <solution>
    return " ".join(w[:1].${case}() + w[1:] for w in ${arg}.split(" "))
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [("hello big World",), ("ABC dEF",)],
    cases=lambda rng, p: [("",), ("a",), ("Zz",), (gen.text(rng, 2, 5),), (gen.text(rng, 2, 5).upper(),),
                          ("one  two",), ("x Y z",)],
)

PALINDROME = Template(
    name="palindrome", family="strings", tier=2,
    axes={"fn": ("is_palindrome", "reads_same_backwards", "palindromic"), "arg": ("text", "s", "phrase"),
          "ignore": ("spaces", "spaces and case")},
    source='''\
def normalize_spaces(s: str) -> str:
    """Return s with runs of whitespace collapsed to single spaces."""
    return " ".join(s.split())


def ${fn}(${arg}: str) -> bool:
    """Return True when ${arg} reads the same forwards and backwards, ignoring ${ignore}.

    ${examples}
    """
    # <solution>
    cleaned = ${arg}.replace(" ", "")
    if "case" in "${ignore}":
        cleaned = cleaned.lower()
    return cleaned == cleaned[::-1]
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [("never odd or even",), ("abc",)],
    cases=lambda rng, p: [("",), ("a",), ("Aa",), ("step on no pets",), ("Step on no pets",), (gen.word(rng),),
                          ("ab ba",), ("abca",)],
)

RUN_LENGTH = Template(
    name="run-length", family="strings", tier=3,
    axes={"fn": ("run_length", "encode_runs", "compress"), "order": ("the character followed by the run's length", "the run's length followed by the character"),
          "arg": ("s", "text")},
    source='''\
def expand(pairs: list) -> str:
    """Return the text that a list of (character, count) pairs describes."""
    return "".join(ch * n for ch, n in pairs)


def ${fn}(${arg}: str) -> str:
    """Run-length encode ${arg}: each run of one repeated character becomes ${order}.

    ${examples}
    """
    # <solution>
    out = []
    i = 0
    while i < len(${arg}):
        j = i
        while j < len(${arg}) and ${arg}[j] == ${arg}[i]:
            j += 1
        out.append(f"{${arg}[i]}{j - i}" if "${order}".startswith("the character") else f"{j - i}{${arg}[i]}")
        i = j
    return "".join(out)
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [("aaabcc",), ("x",)],
    cases=lambda rng, p: [("",), ("a",), ("aaaa",), ("abab",), (gen.letters(rng, "ab", 5, 12),),
                          (gen.letters(rng, "xyz", 5, 12),), ("aaaaaaaaaaaa",)],
)

TEMPLATES = [REVERSE, COUNT_CHAR, REPEAT, CAPITALIZE, PALINDROME, RUN_LENGTH]
