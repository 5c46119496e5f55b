#!/usr/bin/python3
"""`pip`/`pip3` of swerl's offline base image: a fast path in front of the real pip.

Verifiers start with `pip3 install pytest || true` (pymethods2test's test.sh). Offline and
with pytest installed, pip only answers "Requirement already satisfied", after ~0.4 s of
start-up per trial. This answers the same for `install NAME...` when every NAME is an
installed distribution (no version specifiers, no options but -q/--no-cache-dir/...), in
~30 ms; any other command line runs the real pip (`python3 -m pip`) unchanged.
"""
import os
import re
import sys

HARMLESS = {"-q", "-qq", "-qqq", "--quiet", "--disable-pip-version-check", "--no-cache-dir",
            "--root-user-action=ignore", "--no-input", "--break-system-packages"}


def already_satisfied(args):
    """Lines to print when `pip <args>` would change nothing, else None."""
    if not args or args[0] != "install":
        return None
    names = [a for a in args[1:] if a not in HARMLESS]
    if not names or any(not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", n) for n in names):
        return None
    from importlib.metadata import PackageNotFoundError, distribution

    lines = []
    for name in names:
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            return None
        where = str(dist.locate_file("")).rstrip("/")
        lines.append(f"Requirement already satisfied: {name} in {where or sys.prefix} ({dist.version})")
    return lines


lines = already_satisfied(sys.argv[1:])
if lines is None:
    os.execv(sys.executable, [sys.executable, "-m", "pip", *sys.argv[1:]])
if not any(a.startswith("-q") or a == "--quiet" for a in sys.argv[1:]):
    print("\n".join(lines))
