"""Templates of the arithmetic family: numbers in, a number or a truth value out."""

from __future__ import annotations

from swerl.tasks.generate.template import Template

LINEAR = Template(
    name="linear", family="arithmetic", tier=1,
    axes={"fn": ("scale_and_shift", "linear", "transform"), "a": ("2", "3", "5", "-1"), "b": ("1", "-4", "7"),
          "arg": ("x", "n", "value")},
    source='''\
def square(x: int) -> int:
    """Return x times x."""
    return x * x


def ${fn}(${arg}: int) -> int:
    """Return ${arg} multiplied by ${a}, plus ${b}.

    ${examples}
    """
    # <solution>
    return ${arg} * ${a} + ${b}
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [(2,), (0,)],
    cases=lambda rng, p: [(0,), (1,), (-1,), (rng.randint(2, 50),), (rng.randint(-50, -2),), (1000,)],
)

IS_MULTIPLE = Template(
    name="is-multiple", family="arithmetic", tier=1,
    axes={"fn": ("is_multiple", "divisible", "is_divisible"), "k": ("3", "4", "5", "7", "10"), "arg": ("n", "number")},
    source='''\
def is_even(n: int) -> bool:
    """Return True when n is even."""
    return n % 2 == 0


def ${fn}(${arg}: int) -> bool:
    """Return True when ${arg} is a multiple of ${k} (0 counts as one), else False.

    ${examples}
    """
    # <solution>
    return ${arg} % ${k} == 0
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [(int(p["k"]) * 2,), (int(p["k"]) + 1,)],
    cases=lambda rng, p: [(0,), (1,), (int(p["k"]),), (-int(p["k"]),), (int(p["k"]) * rng.randint(2, 9),),
                          (int(p["k"]) * rng.randint(2, 9) + 1,), (int(p["k"]) - 1,)],
)

CLAMP = Template(
    name="clamp", family="arithmetic", tier=1,
    axes={"fn": ("clamp", "limit", "bound"), "lo": ("0", "-5", "1"), "hi": ("10", "100", "255"), "arg": ("x", "value")},
    source='''\
def absolute(x: int) -> int:
    """Return the absolute value of x."""
    return -x if x < 0 else x


def ${fn}(${arg}: int) -> int:
    """Return ${arg} limited to the range ${lo} to ${hi}: ${lo} when it is below ${lo}, ${hi} when
    it is above ${hi}, else ${arg} itself.

    ${examples}
    """
    # <solution>
    return max(${lo}, min(${hi}, ${arg}))
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [(int(p["hi"]) + 3,), (int(p["lo"]) + 1,)],
    cases=lambda rng, p: [(int(p["lo"]),), (int(p["hi"]),), (int(p["lo"]) - 1,), (int(p["hi"]) + 1,),
                          (rng.randint(int(p["lo"]), int(p["hi"])),), (-1000,), (1000,)],
)

DIGIT_SUM = Template(
    name="digit-sum", family="arithmetic", tier=2,
    axes={"fn": ("digit_sum", "sum_of_digits", "add_digits"), "which": ("all", "even", "odd"), "arg": ("n", "number")},
    source='''\
def digit_count(n: int) -> int:
    """Return how many decimal digits n has (ignoring its sign)."""
    return len(str(abs(n)))


def ${fn}(${arg}: int) -> int:
    """Return the sum of the ${desc} of ${arg} in decimal, ignoring its sign.

    ${examples}
    """
    # <solution>
    digits = [int(c) for c in str(abs(${arg}))]
    return sum(d for d in digits if "${which}" == "all" or (d % 2 == 0) == ("${which}" == "even"))
    # </solution>
''',
    target="${fn}",
    derive=lambda p: {"desc": {"all": "digits", "even": "even digits", "odd": "odd digits"}[p["which"]]},
    examples=lambda p: [(1234,), (-56,)],
    cases=lambda rng, p: [(0,), (7,), (-8,), (10,), (rng.randint(100, 99999),), (-rng.randint(100, 99999),),
                          (13579,), (2468,)],
)

FIZZBUZZ = Template(
    name="fizzbuzz", family="arithmetic", tier=2,
    axes={"fn": ("fizzbuzz", "label", "say"), "a": ("3", "2"), "b": ("5", "7"),
          "words": (("Fizz", "Buzz"), ("Foo", "Bar"), ("Ping", "Pong"))},
    source='''\
def is_positive(n: int) -> bool:
    """Return True when n is above zero."""
    return n > 0


def ${fn}(n: int) -> str:
    """Return "${w1}${w2}" when n is a multiple of both ${a} and ${b}, "${w1}" when only of ${a},
    "${w2}" when only of ${b}, and otherwise n written in decimal.

    ${examples}
    """
    # <solution>
    if n % ${a} == 0 and n % ${b} == 0:
        return "${w1}${w2}"
    if n % ${a} == 0:
        return "${w1}"
    if n % ${b} == 0:
        return "${w2}"
    return str(n)
    # </solution>
''',
    target="${fn}",
    derive=lambda p: {"w1": p["words"][0], "w2": p["words"][1]},
    examples=lambda p: [(int(p["a"]),), (int(p["a"]) * int(p["b"]),), (1,)],
    cases=lambda rng, p: [(0,), (1,), (int(p["a"]),), (int(p["b"]),), (int(p["a"]) * int(p["b"]) * 2,),
                          (rng.randint(1, 200),), (rng.randint(1, 200),), (-int(p["b"]),)],
)

IS_PRIME = Template(
    name="is-prime", family="arithmetic", tier=2,
    axes={"fn": ("is_prime", "prime", "check_prime"), "arg": ("n", "number", "k")},
    source='''\
def is_odd(n: int) -> bool:
    """Return True when n is odd."""
    return n % 2 == 1


def ${fn}(${arg}: int) -> bool:
    """Return True when ${arg} is a prime number (numbers below 2 are not prime).

    ${examples}
    """
    # <solution>
    if ${arg} < 2:
        return False
    return all(${arg} % d for d in range(2, int(${arg} ** 0.5) + 1))
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [(7,), (9,)],
    cases=lambda rng, p: [(-7,), (0,), (1,), (2,), (4,), (25,), (97,), (rng.randint(100, 999),), (7919,)],
)

MEAN = Template(
    name="mean-rounded", family="arithmetic", tier=2,
    axes={"fn": ("average", "mean", "mean_value"), "digits": ("1", "2"), "empty": ("0.0", "None"),
          "arg": ("numbers", "xs")},
    source='''\
def total(xs: list) -> int:
    """Return the sum of xs."""
    return sum(xs)


def ${fn}(${arg}: list) -> float:
    """Return the mean of ${arg} rounded to ${digits} decimal place(s) with round(), or ${empty}
    when ${arg} is empty.

    ${examples}
    """
    # <solution>
    if not ${arg}:
        return ${empty}
    return round(sum(${arg}) / len(${arg}), ${digits})
    # </solution>
''',
    target="${fn}",
    examples=lambda p: [([1, 2, 4],), ([],)],
    cases=lambda rng, p: [([],), ([5],), ([1, 2],), ([rng.randint(-9, 30) for _ in range(rng.randint(3, 7))],),
                          ([rng.randint(-9, 30) for _ in range(rng.randint(3, 7))],)],
)

TEMPLATES = [LINEAR, IS_MULTIPLE, CLAMP, DIGIT_SUM, FIZZBUZZ, IS_PRIME, MEAN]
