"""The verifier protocol (docs/sandbox.md), and reading its reward.

After the agent stops: kill every process left, wipe and recreate ``/logs/verifier`` (a
planted reward file is gone), put ``tests/`` at ``/tests`` (uploaded only now; in the clean
room the work product arrives with it; a separate verifier's own image holds its ``/tests``),
run ``bash /tests/test.sh`` under the verifier timeout with its output in
``/logs/verifier/test-stdout.txt``, kill every process the tests left, give root its rights on
``/logs/verifier`` and the reward files back (the code under test may have taken them; the modes
found are reported), then read ``reward.txt`` else ``reward.json`` (at most 1 MiB). All of it is
one keeper command (or ``docker exec``) of :data:`VERIFY_SCRIPT`, which reports back in marked
sections.
"""

from __future__ import annotations

import json
import math
import re

from swerl.sandbox.runtime.channel import ended_by_timeout
from swerl.sandbox.types import Outcome, VerifierResult

# $1: "-" = one tar on stdin to extract at / (tests/... and, in the clean room, the work
# product), else a staging dir (uploaded before) whose contents are copied to /;
# $2: timeout seconds; $3: "upload" (tests/ arrives with the tar: /tests is wiped first) or
# "image" (a separate verifier's fresh container whose image holds /tests: kept);
# $4...: work-product paths to clear first (clean room).
# Leftover processes die before the tests land, and those the tests started before the
# reward is read.
VERIFY_SCRIPT = r"""
oom() {
  for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
    [ -r "$f" ] || continue
    while read -r k v; do [ "$k" = oom_kill ] && printf %s "$v"; done < "$f"; return
  done
}
emit() { printf '\036%s\037' "$1"; }
# Move /logs/verifier and /tests aside, then delete what can be deleted. The agent is root
# without CAP_DAC_OVERRIDE/CAP_FOWNER, so it can make them unremovable (a read-only folder,
# a foreign-owned folder moved in), but it cannot chown: / and /logs stay root's, root can
# always give itself their write bit back, and a rename within one folder needs nothing else.
wipe() {
  t=$$-$(date +%s%N 2>/dev/null)
  chmod u+rwx / 2>/dev/null
  if [ ! -L /logs ] && [ -d /logs ] && chmod u+rwx /logs 2>/dev/null; then
    if [ -e /logs/verifier ] || [ -L /logs/verifier ]; then mv -f /logs/verifier "/logs/.swerl-stale-$t"; fi
  elif [ -e /logs ] || [ -L /logs ]; then mv -f /logs "/.swerl-stale-logs-$t"; fi
  if [ "$tests" = upload ] && { [ -e /tests ] || [ -L /tests ]; }; then mv -f /tests "/.swerl-stale-tests-$t"; fi
  for s in /logs/.swerl-stale-* /.swerl-stale-*; do
    if [ -e "$s" ] || [ -L "$s" ]; then chmod -R u+rwX "$s" 2>/dev/null; rm -rf "$s" 2>/dev/null; fi
  done
}
if [ "$1" = - ] && ! command -v tar >/dev/null 2>&1; then emit notar; exit 0; fi
src=$1; limit=$2; tests=$3; shift 3
# test.sh runs in the image's WORKDIR (this script's start folder), entered again after the work
# product replaced it: a folder deleted under a process stays its (dead) cwd.
wd=$PWD; cd /
kill -KILL -1 2>/dev/null
emit oom_before; oom
wipe
[ $# -eq 0 ] || rm -rf "$@"
mkdir -p /logs/verifier /tests
if [ "$src" = - ]; then tar -x -C / -f -; else cp -a "$src"/. / && rm -rf "$src"; fi
cd "$wd" 2>/dev/null || cd /
timeout -s KILL "$limit" bash /tests/test.sh >/logs/verifier/test-stdout.txt 2>&1 </dev/null &
wait $!; rc=$?
kill -KILL -1 2>/dev/null
# The code under test may have taken rights away (chmod of /logs/verifier or of the reward file):
# they are root's, and the owner can always give them back, so the reward is read; the modes found
# are reported (evidence of tampering, never a missing reward).
emit rights
for p in /logs /logs/verifier; do printf '%s=%s ' "$p" "$(stat -c %a "$p" 2>/dev/null)"; chmod u+rwx "$p" 2>/dev/null; done
for p in /logs/verifier/reward.txt /logs/verifier/reward.json /logs/verifier/test-stdout.txt; do
  if [ -f "$p" ] && [ ! -L "$p" ]; then printf '%s=%s ' "$p" "$(stat -c %a "$p" 2>/dev/null)"; chmod u+r "$p" 2>/dev/null; fi
done
emit rc; printf %s "$rc"
emit oom_after; oom
[ -f /logs/verifier/reward.txt ] && { emit reward_txt; head -c 4096 /logs/verifier/reward.txt; }
[ -f /logs/verifier/reward.json ] && { emit reward_json; head -c 1048577 /logs/verifier/reward.json; }
emit tail; tail -c 4000 /logs/verifier/test-stdout.txt 2>/dev/null
true
"""
# Bytes of the script's report: a 1 MiB reward.json, the 4000-byte tail and the small sections.
VERIFY_OUTPUT_BYTES = 1_100_000
MAX_REWARD_JSON_BYTES = 1 << 20
_SECTION_RE = re.compile(r"\x1e([a-z_]+)\x1f")


def parse_sections(output: str) -> dict[str, str]:
    """Split the script's output into ``{section: text}``; ``tail`` is taken verbatim to the end."""
    sections: dict[str, str] = {}
    tail_at = output.find("\x1etail\x1f")
    head, tail = (output, None) if tail_at < 0 else (output[:tail_at], output[tail_at + 6 :])
    parts = _SECTION_RE.split(head)
    for name, value in zip(parts[1::2], parts[2::2]):
        sections[name] = value
    if tail is not None:
        sections["tail"] = tail
    return sections


def read_reward(sections: dict[str, str]) -> tuple[Outcome | None, float, str]:
    """Reward from ``reward.txt`` (one float) else ``reward.json`` (``{"reward": x, ...}``).

    Returns:
        (None, reward, "") for a valid reward in [0, 1]; else (no_reward_file | bad_reward, 0.0, why).
    """
    txt = sections.get("reward_txt", "").strip()
    js = sections.get("reward_json", "").strip()
    if txt:
        source, raw = "reward.txt", txt
        try:
            value = float(raw)
        except ValueError:
            return Outcome.bad_reward, 0.0, f"reward.txt is not a number: {raw[:40]!r}"
    elif js:
        source = "reward.json"
        if len(js.encode("utf-8", "surrogateescape")) > MAX_REWARD_JSON_BYTES:
            return Outcome.bad_reward, 0.0, f"reward.json is over {MAX_REWARD_JSON_BYTES} bytes"
        try:
            data = json.loads(js)
        except ValueError:
            return Outcome.bad_reward, 0.0, f"reward.json is not JSON: {js[:40]!r}"
        if not isinstance(data, dict) or "reward" not in data:
            return Outcome.bad_reward, 0.0, 'reward.json has no "reward" key'
        try:
            value = float(data["reward"])
        except (TypeError, ValueError):
            return Outcome.bad_reward, 0.0, f"reward.json reward is not a number: {data['reward']!r}"
    else:
        which = "empty" if ("reward_txt" in sections or "reward_json" in sections) else "missing"
        return Outcome.no_reward_file, 0.0, f"/logs/verifier/reward.txt and reward.json {which}"
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        return Outcome.bad_reward, 0.0, f"{source} holds {value!r}, not a finite number in [0, 1]"
    return None, value, ""


def verdict(sections: dict[str, str], timed_out: bool, timeout_s: float, duration_s: float) -> VerifierResult:
    """Turn the script's sections into a :class:`VerifierResult` (typed outcome, reward, class)."""
    tail = sections.get("tail", "")
    rc_text = sections.get("rc", "").strip()
    oom_delta = _int(sections.get("oom_after")) - _int(sections.get("oom_before"))

    taken = rights_taken(sections.get("rights", ""))
    restored = f"rights the tests took were restored before reading the reward ({taken})" if taken else ""

    def result(outcome: Outcome, reward: float = 0.0, detail: str = "") -> VerifierResult:
        return VerifierResult(
            outcome=outcome, reward=reward, failure_class=outcome.failure_class,
            output_tail=tail, duration_s=duration_s, detail="; ".join(x for x in (detail, restored) if x),
        )
    if timed_out or ended_by_timeout(int(rc_text) if rc_text.isdigit() else None, duration_s, timeout_s):
        return result(Outcome.verifier_timeout, detail=f"tests/test.sh exceeded the verifier timeout of {timeout_s:g} s")
    problem, reward, why = read_reward(sections)
    signal = killed_by(rc_text)
    if signal is not None and oom_delta == 0:  # whatever a killed verifier left is not its verdict
        return result(Outcome.bad_reward, detail=f"tests/test.sh was killed by signal {signal} (exit {rc_text}): "
                      "a reward file left behind by a killed verifier is not evidence")
    if oom_delta > 0 and (problem is not None or reward < 1.0 or signal is not None):
        return result(Outcome.oom, detail=f"the memory limit was hit ({oom_delta} process(es) OOM-killed)")
    if problem is not None:
        last = next((line.strip() for line in reversed(tail.splitlines()) if line.strip()), "")
        said = f"; its last output line: {last[:200]}" if last else ""
        return result(problem, detail=f"{why} (test.sh exit {rc_text or '?'}{said})")
    if reward >= 1.0:
        return result(Outcome.passed, reward)
    return result(Outcome.failed, reward, detail=f"reward {reward:g} (test.sh exit {rc_text or '?'})")


def killed_by(rc_text: str) -> int | None:
    """The signal that killed ``tests/test.sh`` (its exit status 128 + N, as the shell reports a
    child killed by signal N), else None.

    A verifier that was killed did not finish: a reward file it leaves (or that something else
    wrote while it ran, e.g. the code under test after killing the judge, on a kernel or OCI
    runtime without Landlock) is no trustworthy reward. The trial is then ``bad_reward`` and its
    control run decides the class. A verifier timeout is told apart before (its own outcome), and
    an OOM kill counts as ``oom``.
    """
    rc = int(rc_text) if rc_text.isdigit() else None
    return rc - 128 if rc is not None and 128 < rc <= 128 + 64 else None


def rights_taken(report: str) -> str:
    """The paths of the script's ``rights`` section whose owner lacked read (files) or read, write
    and search (folders), as ``path=mode`` words; ``""`` when none did."""
    taken = []
    for word in report.split():
        path, _, mode = word.rpartition("=")
        need = 0o4 if path.startswith("/logs/verifier/") else 0o7
        try:
            owner = (int(mode, 8) >> 6) & 0o7
        except ValueError:
            continue
        if owner & need != need:
            taken.append(f"{path}={mode}")
    return " ".join(taken)


def _int(text: str | None) -> int:
    try:
        return int((text or "").strip() or 0)
    except ValueError:
        return 0
