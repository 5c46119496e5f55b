"""Templates of the classes family: one method of a small class with state. The hidden tests
run scenarios (a constructor call, then method calls on that instance) in the solution's worker."""

from __future__ import annotations

from swerl.tasks.generate import inputs as gen
from swerl.tasks.generate.template import Template

COUNTER = Template(
    name="counter", family="classes", tier=2, kind="class",
    axes={"cls": ("Counter", "Tally", "Clicker"), "method": ("add", "increment", "bump"), "step": ("1", "2", "5")},
    source='''\
class ${cls}:
    """A number that only grows."""

    def __init__(self, start: int = 0) -> None:
        self.count = start

    def value(self) -> int:
        """Return the current count."""
        return self.count

    def ${method}(self, times: int = 1) -> int:
        """Add ${step} to the count, times times over, and return the new count.

        ${examples}
        """
        # <solution>
        self.count += ${step} * times
        return self.count
        # </solution>
''',
    target="${method}", entry="${cls}", owner="${cls}",
    examples=lambda p: [((), [(p["method"], ()), (p["method"], (3,))])],
    cases=lambda rng, p: [
        ((), [(p["method"], ()), ("value", ())]),
        ((10,), [(p["method"], (2,)), (p["method"], ()), ("value", ())]),
        ((rng.randint(-9, 9),), [(p["method"], (rng.randint(0, 5),)) for _ in range(4)] + [("value", ())]),
        ((0,), [(p["method"], (0,)), ("value", ())]),
    ],
)

STACK_POP = Template(
    name="stack-pop", family="classes", tier=2, kind="class",
    axes={"cls": ("Stack", "Pile", "LifoStack"), "method": ("pop", "take", "pop_top"),
          "error": ("IndexError", "ValueError")},
    source='''\
class ${cls}:
    """Last in, first out."""

    def __init__(self) -> None:
        self.items = []

    def push(self, item) -> None:
        """Put item on top."""
        self.items.append(item)

    def size(self) -> int:
        """Return the number of items held."""
        return len(self.items)

    def ${method}(self):
        """Remove the top item and return it; raise ${error} when there is none.

        ${examples}
        """
        # <solution>
        if not self.items:
            raise ${error}("empty")
        return self.items.pop()
        # </solution>
''',
    target="${method}", entry="${cls}", owner="${cls}",
    examples=lambda p: [((), [("push", (1,)), ("push", (2,)), (p["method"], ())])],
    cases=lambda rng, p: [
        ((), [(p["method"], ())]),
        ((), [("push", ("a",)), (p["method"], ()), ("size", ()), (p["method"], ())]),
        ((), [("push", (x,)) for x in gen.ints(rng, 2, 5)] + [(p["method"], ()), (p["method"], ()), ("size", ())]),
        ((), [("push", (1,)), ("push", (2,)), (p["method"], ()), ("push", (3,)), (p["method"], ()), (p["method"], ())]),
    ],
)

ACCOUNT = Template(
    name="account-withdraw", family="classes", tier=3, kind="class",
    axes={"cls": ("Account", "Wallet", "BankAccount"), "method": ("withdraw", "spend", "take_out"),
          "fee": ("0", "1", "2")},
    source='''\
class ${cls}:
    """A balance in whole units that never goes below zero."""

    def __init__(self, balance: int = 0) -> None:
        self.balance = balance

    def deposit(self, amount: int) -> int:
        """Add amount (must be positive) and return the new balance."""
        if amount <= 0:
            raise ValueError("amount must be positive")
        self.balance += amount
        return self.balance

    def ${method}(self, amount: int) -> int:
        """Take amount plus a fee of ${fee} out of the balance and return the new balance.
        Raise ValueError when amount is not positive, or when the balance is too small
        (then the balance stays as it was).

        ${examples}
        """
        # <solution>
        if amount <= 0 or amount + ${fee} > self.balance:
            raise ValueError("cannot take that out")
        self.balance -= amount + ${fee}
        return self.balance
        # </solution>
''',
    target="${method}", entry="${cls}", owner="${cls}",
    examples=lambda p: [((20,), [(p["method"], (5,))])],
    cases=lambda rng, p: [
        ((10,), [(p["method"], (3,)), (p["method"], (0,)), (p["method"], (-1,))]),
        ((5,), [(p["method"], (100,)), ("deposit", (10,)), (p["method"], (15 - int(p["fee"]),))]),
        ((rng.randint(20, 60),), [(p["method"], (rng.randint(1, 9),)) for _ in range(5)]),
        ((0,), [(p["method"], (1,)), ("deposit", (1,)), (p["method"], (1,))]),
    ],
)

INVENTORY = Template(
    name="inventory-remove", family="classes", tier=3, kind="class",
    axes={"cls": ("Inventory", "Stock", "Pantry"), "method": ("remove", "take", "use")},
    source='''\
class ${cls}:
    """Counts of named items."""

    def __init__(self) -> None:
        self.counts = {}

    def add(self, item: str, quantity: int = 1) -> None:
        """Add quantity of item."""
        self.counts[item] = self.counts.get(item, 0) + quantity

    def quantity(self, item: str) -> int:
        """Return how many of item there are (0 when none)."""
        return self.counts.get(item, 0)

    def items(self) -> list:
        """Return the names of the items held, sorted."""
        return sorted(self.counts)

    def ${method}(self, item: str, quantity: int = 1) -> int:
        """Take quantity of item away and return how many are left. Raise KeyError when the
        item is not held and ValueError when fewer than quantity are held (nothing changes
        then). An item whose count reaches 0 is forgotten (it leaves items()).

        ${examples}
        """
        # <solution>
        if item not in self.counts:
            raise KeyError(item)
        if self.counts[item] < quantity:
            raise ValueError("not enough")
        self.counts[item] -= quantity
        left = self.counts[item]
        if left == 0:
            del self.counts[item]
        return left
        # </solution>
''',
    target="${method}", entry="${cls}", owner="${cls}",
    examples=lambda p: [((), [("add", ("egg", 3)), (p["method"], ("egg", 2))])],
    cases=lambda rng, p: [
        ((), [(p["method"], ("x",))]),
        ((), [("add", ("a", 2)), (p["method"], ("a", 3)), ("quantity", ("a",))]),
        ((), [("add", ("a", 2)), (p["method"], ("a", 2)), ("items", ()), (p["method"], ("a",))]),
        ((), [("add", (w, rng.randint(1, 4))) for w in gen.names(rng, 3)] + [("items", ())]
         + [(p["method"], (gen.WORDS[0],)), ("items", ())]),
    ],
)

TEMPLATES = [COUNTER, STACK_POP, ACCOUNT, INVENTORY]
