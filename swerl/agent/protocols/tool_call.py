"""tool-call: Qwen3/Hermes native function calling with one ``bash`` tool (docs/tasks.md, Agent protocols).

The model calls ``<tool_call>{"name": "bash", "arguments": {"command": "..."}}</tool_call>``;
each command runs in the episode's persistent shell (``cd`` and variables persist) with the
per-command timeout, and its output (truncated to the byte budget) comes back as a ``tool``
message. A reply without any tool call ends the episode (the agent says it is done).
Templates without tool support get the Hermes tool block in the system prompt instead.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from swerl.agent.protocols.base import AgentProtocol, TurnResult, at_parse_failure_cap, limit_output_bytes, strip_thinking

if TYPE_CHECKING:
    from swerl.agent.config import AgentConfig
    from swerl.sandbox.runtime.sandbox import Sandbox
    from swerl.sandbox.runtime.shell import Shell

BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": (
            "Run a command in a persistent bash shell inside the task's Linux container "
            "(working directory and variables persist between calls). Returns the output and exit code."
        ),
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The bash command to run."}},
            "required": ["command"],
        },
    },
}

SYSTEM_PROMPT = (
    "You are a coding agent working in a Linux container. Use the bash tool to inspect files, "
    "write code and run tests until the task is solved. When you are done, reply with a short "
    "summary and no tool call."
)

# Hermes function-calling system block, for templates that do not render ``tools`` themselves.
HERMES_TOOLS_BLOCK = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)

_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def parse_tool_calls(reply: str) -> tuple[list[str], str]:
    """Bash commands of every ``<tool_call>`` block in ``reply`` (thinking stripped).

    Returns: (commands in order, error text or ""); any malformed block makes it an error.
    """
    text = strip_thinking(reply)
    blocks = _TOOL_CALL_RE.findall(text)
    if not blocks and "<tool_call>" in text:
        return [], "Unterminated <tool_call> block: close it with </tool_call>"
    commands: list[str] = []
    for i, block in enumerate(blocks, start=1):
        try:
            call = json.loads(block.strip())
        except (json.JSONDecodeError, RecursionError) as err:  # RecursionError: nesting past the parser's depth
            return [], f"Tool call {i} is not valid JSON: {err}"
        if not isinstance(call, dict) or call.get("name") != "bash":
            return [], f"Tool call {i}: unknown tool {call.get('name') if isinstance(call, dict) else call!r}; only 'bash' exists"
        args = call.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except (json.JSONDecodeError, RecursionError) as err:  # RecursionError: nesting past the parser's depth
                return [], f"Tool call {i}: arguments are not a JSON object: {err}"
        if not isinstance(args, dict) or not isinstance(args.get("command"), str):
            return [], f"Tool call {i}: arguments need a 'command' string"
        commands.append(args["command"])
    return commands, ""


class ToolCall(AgentProtocol):
    """Native tool calling with a single ``bash`` tool on a persistent shell."""

    name = "tool-call"

    def __init__(self, cfg: AgentConfig, template_has_tools: bool = True):
        super().__init__(cfg)
        self.template_has_tools = template_has_tools
        self.shell: Shell | None = None
        self.consecutive_parse_failures = 0

    def tools(self) -> list[dict] | None:
        return [BASH_TOOL]

    def initial_messages(self, instruction: str) -> list[dict]:
        system = SYSTEM_PROMPT
        if not self.template_has_tools:
            system += HERMES_TOOLS_BLOCK.format(tools=json.dumps(BASH_TOOL))
        return [{"role": "system", "content": system}, {"role": "user", "content": instruction.strip()}]

    async def start(self, sandbox: Sandbox) -> None:
        self.shell = await sandbox.open_shell()

    async def act(self, reply: str, sandbox: Sandbox) -> TurnResult:
        commands, error = parse_tool_calls(reply)
        if error:
            self.consecutive_parse_failures += 1
            if at_parse_failure_cap(self.consecutive_parse_failures, self.cfg.limits.max_consecutive_parse_failures):
                return TurnResult(end_reason="parse_failures", parse_failed=True)
            text = f"Error: {error}. Call the bash tool as <tool_call>{{\"name\": \"bash\", \"arguments\": {{\"command\": \"...\"}}}}</tool_call>."
            return TurnResult(observation=[{"role": "user", "content": text}], parse_failed=True)
        self.consecutive_parse_failures = 0
        if not commands:
            return TurnResult(end_reason="task_complete")
        results = [await self._run(command) for command in commands]
        return TurnResult(observation=[{"role": "tool", "name": "bash", "content": r} for r in results])

    async def _run(self, command: str) -> str:
        timeout_s = self.cfg.limits.command_timeout_s
        self.actions.append(command)
        result = await self.shell.run(command, timeout_s)
        output = limit_output_bytes(result.output, self.cfg.output_budget_bytes)
        if result.timed_out:
            return f"{output}\n[command timed out after {timeout_s:g} s and was interrupted]"
        return f"{output}\n[exit code: {result.exit_code}]"
