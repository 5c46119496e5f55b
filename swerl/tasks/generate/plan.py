"""Which template variants go to which split, for a seed: the training set and two held-out
splits, disjoint by construction.

- ``heldout-template``: variants of :data:`~swerl.tasks.generate.HELDOUT_TEMPLATES` only, which
  no other split uses (transfer to templates never trained on).
- ``heldout-instance`` and ``train``: variants of the other templates. Each template's variants
  are put in one order by a generator seeded with (seed, template); ``heldout-instance`` takes
  the first ones, ``train`` the next ones, so no variant is in both, and the held-out splits do
  not change with ``count`` (a larger training set only adds tasks).

Quotas go round-robin over the templates (in an order drawn from the seed), one task at a
time, skipping templates whose variants are used up, so every template of the chosen tiers is
represented as evenly as its variants allow.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from swerl.errors import ConfigError
from swerl.tasks.generate import HELDOUT_TEMPLATES, TEMPLATES
from swerl.tasks.generate.template import Template

SPLITS = ("train", "heldout-instance", "heldout-template")


@dataclass(frozen=True)
class Instance:
    """One task to write: variant ``variant`` of ``template`` in ``split``."""

    split: str
    template: Template
    variant: int

    @property
    def name(self) -> str:
        """``pm-t<tier>-<family>-<template>-<variant, 4 digits>``, e.g. ``pm-t1-strings-reverse-0042``."""
        t = self.template
        return f"pm-t{t.tier}-{t.family}-{t.name}-{self.variant:04d}"


def _spread(templates: list[Template], total: int, room: dict[str, int], what: str) -> dict[str, int]:
    """``total`` tasks dealt one at a time round-robin over ``templates``, at most ``room[name]`` each.

    Raises:
        ConfigError: the templates hold fewer than ``total`` variants.
    """
    if total > sum(room[t.name] for t in templates):
        raise ConfigError(f"{what}: asked for {total} tasks, but the templates of these tiers hold only "
                          f"{sum(room[t.name] for t in templates)} unused variants; ask for fewer or add tiers")
    quota = {t.name: 0 for t in templates}
    given = 0
    while given < total:
        for t in templates:
            if given < total and quota[t.name] < room[t.name]:
                quota[t.name] += 1
                given += 1
    return quota


def _order(seed: int, template: Template) -> list[int]:
    """All variant numbers of ``template`` in the order drawn for ``seed``."""
    return random.Random(f"{seed}/{template.name}").sample(range(template.size), template.size)


def plan(seed: int, count: int, heldout_count: int, tiers: tuple[int, ...]) -> list[Instance]:
    """The instances of each split (train, then heldout-instance, then heldout-template).

    Args:
        seed: chooses the variants and the round-robin order.
        count: training tasks. heldout_count: tasks in each held-out split.
        tiers: only templates of these tiers are used.
    Raises:
        ConfigError: a split asks for more variants than its templates hold, or no template of
            ``tiers`` is trained on.
    """
    rng = random.Random(seed)
    chosen = [t for t in TEMPLATES if t.tier in tiers]
    trained = [t for t in chosen if t.name not in HELDOUT_TEMPLATES]
    held = [t for t in chosen if t.name in HELDOUT_TEMPLATES]
    if not trained:
        raise ConfigError(f"--tiers {','.join(map(str, tiers))}: no trainable template in these tiers; add tiers")
    rng.shuffle(trained)
    rng.shuffle(held)
    size = {t.name: t.size for t in chosen}
    instance_quota = _spread(trained, heldout_count, size, "--heldout-count (heldout-instance)")
    train_quota = _spread(trained, count, {n: size[n] - instance_quota.get(n, 0) for n in size}, "--count")
    template_quota = _spread(held, heldout_count if held else 0, size, "--heldout-count (heldout-template)")
    out: list[Instance] = []
    for t in sorted(trained, key=lambda t: t.name):
        order = _order(seed, t)
        first = instance_quota[t.name]
        out += [Instance("train", t, v) for v in order[first:first + train_quota[t.name]]]
        out += [Instance("heldout-instance", t, v) for v in order[:first]]
    for t in sorted(held, key=lambda t: t.name):
        out += [Instance("heldout-template", t, v) for v in _order(seed, t)[:template_quota[t.name]]]
    return sorted(out, key=lambda i: (SPLITS.index(i.split), i.name))
