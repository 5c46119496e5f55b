"""Random test inputs for the templates: words, texts, integer lists (all from one ``random.Random``)."""

from __future__ import annotations

import random

WORDS = ("apple", "river", "stone", "cloud", "tiger", "lemon", "piano", "ocean", "zebra", "maple", "ember",
         "delta", "orbit", "pixel", "sugar", "cedar", "lunar", "amber", "noble", "eagle", "igloo", "umbra")


def word(rng: random.Random) -> str:
    return rng.choice(WORDS)


def words(rng: random.Random, low: int = 1, high: int = 5) -> list[str]:
    return [word(rng) for _ in range(rng.randint(low, high))]


def text(rng: random.Random, low: int = 1, high: int = 5) -> str:
    return " ".join(words(rng, low, high))


def letters(rng: random.Random, alphabet: str = "abcde", low: int = 0, high: int = 9) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(low, high)))


def ints(rng: random.Random, low: int = 0, high: int = 8, lo: int = -20, hi: int = 20) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(rng.randint(low, high))]


def names(rng: random.Random, count: int) -> list[str]:
    """``count`` distinct words."""
    return rng.sample(WORDS, count)
