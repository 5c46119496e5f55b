"""Templates of the parsing family: structured text in, plain values out."""

from __future__ import annotations

from swerl.tasks.generate import inputs as gen
from swerl.tasks.generate.template import Template

PARSE_INTS = Template(
    name="parse-ints", family="parsing", tier=2,
    axes={"fn": ("parse_ints", "read_numbers", "to_int_list"), "sep": (",", ";", "|"), "arg": ("text", "line")},
    source='''\
def join_ints(xs: list) -> str:
    """Return the numbers of xs written in decimal, joined by '${sep}'."""
    return "${sep}".join(str(x) for x in xs)


def ${fn}(${arg}: str) -> list:
    """Return the integers in ${arg}, which are separated by '${sep}' with optional spaces around
    them. A blank ${arg} gives an empty list.

    ${examples}
    """
    # <solution>
    if not ${arg}.strip():
        return []
    return [int(part) for part in ${arg}.split("${sep}")]
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [(f"1{p['sep']} 22{p['sep']}-3",), ("",)],
    cases=lambda rng, p: [("",), ("   ",), ("7",), (f" 4 {p['sep']} 5 ",),
                          (p["sep"].join(str(x) for x in gen.ints(rng, 2, 7)),),
                          ((p["sep"] + " ").join(str(x) for x in gen.ints(rng, 2, 7)),)],
)

PARSE_KV = Template(
    name="parse-pairs", family="parsing", tier=2,
    axes={"fn": ("parse_pairs", "parse_settings", "read_options"), "pair": (";", ",", "&"), "eq": ("=", ":"),
          "arg": ("text", "spec")},
    source='''\
def format_pairs(d: dict) -> str:
    """Write d as key${eq}value pairs joined by '${pair}' (the inverse of ${fn})."""
    return "${pair}".join(f"{k}${eq}{v}" for k, v in d.items())


def ${fn}(${arg}: str) -> dict:
    """Parse "key${eq}value" pairs separated by '${pair}' into a dict from key to value (both
    strings, spaces around them stripped). Empty pairs are skipped; a later key wins.

    ${examples}
    """
    # <solution>
    out = {}
    for part in ${arg}.split("${pair}"):
        if part.strip():
            key, _, value = part.partition("${eq}")
            out[key.strip()] = value.strip()
    return out
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [(f"a{p['eq']}1{p['pair']} b {p['eq']} x",)],
    cases=lambda rng, p: [("",), (f"k{p['eq']}v",), (f"a{p['eq']}1{p['pair']}{p['pair']}b{p['eq']}2{p['pair']}",),
                          (f"x{p['eq']}1{p['pair']}x{p['eq']}2",),
                          (p["pair"].join(f"{w}{p['eq']}{rng.randint(0, 99)}" for w in gen.names(rng, 4)),)],
)

DURATION = Template(
    name="parse-duration", family="parsing", tier=3,
    axes={"fn": ("parse_duration", "to_seconds", "duration_seconds"), "arg": ("text", "spec", "duration")},
    source='''\
def format_seconds(total: int) -> str:
    """Write a number of seconds as 'XhYmZs', leaving out zero parts ('0s' for 0)."""
    h, rest = divmod(total, 3600)
    m, s = divmod(rest, 60)
    parts = [f"{n}{u}" for n, u in ((h, "h"), (m, "m"), (s, "s")) if n]
    return "".join(parts) or "0s"


def ${fn}(${arg}: str) -> int:
    """Return the number of seconds in a duration such as '1h30m' or '45s': numbers each
    followed by a unit h, m or s. Raise ValueError for an empty text, an unknown unit or a
    number without a unit.

    ${examples}
    """
    # <solution>
    units = {"h": 3600, "m": 60, "s": 1}
    total, digits = 0, ""
    for ch in ${arg}:
        if ch.isdigit():
            digits += ch
        elif ch in units and digits:
            total += int(digits) * units[ch]
            digits = ""
        else:
            raise ValueError(f"bad duration: {${arg}!r}")
    if digits or not ${arg}:
        raise ValueError(f"bad duration: {${arg}!r}")
    return total
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [("1h30m",), ("45s",)],
    cases=lambda rng, p: [("0s",), ("2h",), ("1m1s",), (f"{rng.randint(1, 9)}h{rng.randint(0, 59)}m{rng.randint(0, 59)}s",),
                          ("",), ("10",), ("5x",), ("h",)],
)

CLOCK = Template(
    name="parse-clock", family="parsing", tier=3,
    axes={"fn": ("minutes_since_midnight", "clock_minutes", "parse_time"), "arg": ("text", "clock", "hhmm")},
    source='''\
def format_clock(minutes: int) -> str:
    """Write a number of minutes after midnight as 'HH:MM'."""
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def ${fn}(${arg}: str) -> int:
    """Return the minutes after midnight of a time written 'H:MM' or 'HH:MM' (24-hour clock).
    Raise ValueError when it is not of that form or the hour or minute is out of range.

    ${examples}
    """
    # <solution>
    hours, sep, minutes = ${arg}.partition(":")
    if (not sep or not hours.isdigit() or not minutes.isdigit() or len(minutes) != 2
            or len(hours) not in (1, 2)):
        raise ValueError(f"bad time: {${arg}!r}")
    h, m = int(hours), int(minutes)
    if h > 23 or m > 59:
        raise ValueError(f"bad time: {${arg}!r}")
    return h * 60 + m
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [("01:30",), ("9:05",)],
    cases=lambda rng, p: [("00:00",), ("23:59",), (f"{rng.randint(0, 23)}:{rng.randint(0, 59):02d}",), ("24:00",),
                          ("12:60",), ("1230",), ("12:5",), ("",)],
)

TEMPLATES = [PARSE_INTS, PARSE_KV, DURATION, CLOCK]
