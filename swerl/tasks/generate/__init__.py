"""``swerl tasks generate pymethods``: pymethods2test-shaped tasks made from templates, in tiers,
with a training set and two held-out splits (``docs/tasks.md``, Generated pymethods tasks).

- :mod:`.template`: what a template is and how one variant is rendered (stub, oracle, cases).
- :mod:`.strings`, :mod:`.lists`, :mod:`.dicts`, :mod:`.arithmetic`, :mod:`.classes`,
  :mod:`.parsing`: the templates, one module per family.
- :mod:`.plan`: which variants go to which split, for a seed.
- :mod:`.write`: one variant as a task spec; :mod:`.pymethods`: the whole output folder.
"""

from __future__ import annotations

from swerl.tasks.generate import arithmetic, classes, dicts, lists, parsing, strings
from swerl.tasks.generate.template import Template

TEMPLATES: list[Template] = [*strings.TEMPLATES, *lists.TEMPLATES, *dicts.TEMPLATES, *arithmetic.TEMPLATES,
                             *classes.TEMPLATES, *parsing.TEMPLATES]
FAMILIES = ("strings", "lists", "dicts", "arithmetic", "classes", "parsing")
TIERS = (1, 2, 3)

# Never trained on: the heldout-template split (transfer). One per family, tiers 1 and 2, so a
# training run on tiers 1-2 has templates of both tiers to transfer to.
HELDOUT_TEMPLATES = frozenset({"count-char", "count-matching", "is-multiple", "invert", "parse-pairs", "stack-pop"})
BY_NAME = {t.name: t for t in TEMPLATES}
