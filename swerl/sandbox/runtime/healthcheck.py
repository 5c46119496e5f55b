"""The task's ``[environment.healthcheck]``, run in a started container before it is used.

Docker's HEALTHCHECK semantics, as Harbor's task format gives them: attempts every
``start_interval_sec`` during ``start_period_sec`` (their failures do not count), then every
``interval_sec``; healthy at the first attempt that exits 0, unhealthy after ``retries``
failures in a row past the start period. Each attempt is bounded by ``timeout_sec`` inside the
container. Unhealthy is an infrastructure outcome (``healthcheck_failed``, masked): the task's
environment is not ready, whatever the agent would have done.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from swerl.errors import SandboxError
from swerl.sandbox.types import Outcome

if TYPE_CHECKING:
    from swerl.sandbox.runtime.sandbox import Sandbox
    from swerl.tasks.task_toml import HealthcheckSection


async def wait_healthy(sb: Sandbox, check: HealthcheckSection, where: str = "[environment.healthcheck]") -> int:
    """Run ``check.command`` in ``sb`` until it passes.

    Returns:
        attempts made (the last one passed).

    Raises:
        SandboxError: ``outcome`` healthcheck_failed after ``retries`` failures in a row past
            the start period, naming the command's exit status and the tail of its output.
    """
    began = time.monotonic()
    attempts = failures = 0
    while True:
        attempts += 1
        result = await sb.exec(check.command, timeout_s=check.timeout_sec)
        if result.exit_code == 0 and not result.timed_out:
            return attempts
        in_start_period = time.monotonic() - began < check.start_period_sec
        failures = 0 if in_start_period else failures + 1
        if failures >= check.retries:
            status = "timed out" if result.timed_out else f"exit {result.exit_code}"
            tail = " ".join(result.output.strip().split())[-200:]
            raise SandboxError(
                f"{sb.task.name}: {where} `{check.command[:120]}` failed {failures} time(s) in a row ({status}: "
                f"{tail or 'no output'}); the task's environment is not ready, so the trial is masked",
                outcome=Outcome.healthcheck_failed,
            )
        await asyncio.sleep(check.start_interval_sec if in_start_period else check.interval_sec)
