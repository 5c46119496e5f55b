"""Parsers and text helpers of the three protocols (pure text; sandbox runs are in test_episode)."""

import json

from swerl.agent.protocols import limit_output_bytes, strip_thinking
from swerl.agent.protocols.single_turn import extract_python_block, prefill_text
from swerl.agent.protocols.terminus_json import translate_keystrokes
from swerl.agent.protocols.terminus_parser import parse_terminus_reply
from swerl.agent.protocols.tool_call import parse_tool_calls


def _reply(commands, task_complete=False, **extra):
    return json.dumps({"analysis": "a", "plan": "p", "commands": commands, "task_complete": task_complete, **extra})


def test_terminus_reply_yields_commands_and_completion():
    parsed = parse_terminus_reply(_reply([{"keystrokes": "ls\n", "duration": 0.1}, {"keystrokes": "pwd\n"}], True))
    assert parsed.error == ""
    assert [(c.keystrokes, c.duration_s) for c in parsed.commands] == [("ls\n", 0.1), ("pwd\n", 1.0)]
    assert parsed.task_complete is True
    assert any("duration" in w for w in parsed.warnings)


def test_terminus_text_around_json_is_a_warning_not_an_error():
    parsed = parse_terminus_reply("Sure! " + _reply([]) + " done")
    assert parsed.error == ""
    assert "Extra text detected before JSON object" in parsed.warnings
    assert "Extra text detected after JSON object" in parsed.warnings


def test_terminus_braces_inside_strings_do_not_end_the_object():
    parsed = parse_terminus_reply(_reply([{"keystrokes": "echo '}{' \"q\"\n", "duration": 0.1}]))
    assert parsed.commands[0].keystrokes == "echo '}{' \"q\"\n"


def test_terminus_missing_closing_brace_is_auto_corrected():
    parsed = parse_terminus_reply(_reply([])[:-1])
    assert parsed.error == ""
    assert parsed.warnings[0].startswith("AUTO-CORRECTED")


def test_terminus_malformed_replies_are_errors():
    assert parse_terminus_reply("I will now run ls").error == "No valid JSON found in response"
    assert parse_terminus_reply('{"analysis": "a", "plan": }').error.startswith("Invalid JSON")
    assert parse_terminus_reply('{"analysis": "a"}').error == "Missing required fields: plan, commands"
    assert parse_terminus_reply('{"analysis": "a", "plan": "b", "commands": "ls"}').error.startswith("Field 'commands'")
    assert "keystrokes" in parse_terminus_reply(_reply([{"duration": 1}])).error


def test_terminus_string_true_counts_as_completion():
    assert parse_terminus_reply(_reply([], task_complete="True")).task_complete is True


def test_control_key_names_become_control_characters():
    assert translate_keystrokes("C-c") == "\x03"
    assert translate_keystrokes("C-d\n") == "\x04"
    assert translate_keystrokes("echo C-c\n") == "echo C-c\n"


def test_thinking_is_removed_before_parsing():
    assert strip_thinking("<think>{\"x\": 1}</think>\n{}") == "\n{}"
    assert strip_thinking("ok <think>never closed") == "ok "


def test_output_limit_keeps_head_and_tail_and_counts_the_rest():
    text = "H" * 6000 + "M" * 20000 + "T" * 6000
    out = limit_output_bytes(text, 10000)
    assert out.startswith("H" * 5000) and out.endswith("T" * 5000)
    assert "22000 interior bytes omitted" in out
    assert limit_output_bytes("short", 10000) == "short"


def test_output_limit_never_splits_a_character():
    out = limit_output_bytes("é" * 10000, 1001)
    out.encode("utf-8")  # valid text
    assert out.startswith("é" * 250) and out.endswith("é" * 250)


def test_tool_calls_are_parsed_in_order():
    reply = (
        '<think>plan</think>I will look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'
        '<tool_call>{"name": "bash", "arguments": "{\\"command\\": \\"pwd\\"}"}</tool_call>'
    )
    assert parse_tool_calls(reply) == (["ls", "pwd"], "")
    assert parse_tool_calls("All done.") == ([], "")


def test_bad_tool_calls_are_errors():
    assert "not valid JSON" in parse_tool_calls("<tool_call>{bash}</tool_call>")[1]
    assert "unknown tool" in parse_tool_calls('<tool_call>{"name": "python", "arguments": {}}</tool_call>')[1]
    assert "command" in parse_tool_calls('<tool_call>{"name": "bash", "arguments": {"cmd": "ls"}}</tool_call>')[1]
    assert "Unterminated" in parse_tool_calls('<tool_call>{"name": "bash"')[1]


def test_first_python_block_is_extracted():
    reply = "Here:\n```python\ndef f():\n    return 1\n```\nand\n```python\nx = 2\n```"
    assert extract_python_block(reply) == "def f():\n    return 1\n"
    assert extract_python_block("```\nprint(1)\n```") == "print(1)\n"
    assert extract_python_block("```python\ndef g():\n    pass") == "def g():\n    pass"
    assert extract_python_block("no code here") is None


def test_prefill_modes():
    instruction = "Do it.\n\n```text\nnot code\n```\n\n```python\nfrom typing import List\n\n\ndef f(x: List[int]) -> int:\n    \"\"\"Sum.\"\"\"\n```\nmore\n```python\nx = 2\n```"
    assert prefill_text(instruction, "none") == ""
    assert prefill_text(instruction, "fence") == "```python\n"
    assert prefill_text(instruction, "starter_code") == (
        "```python\nfrom typing import List\n\n\ndef f(x: List[int]) -> int:\n    \"\"\"Sum.\"\"\"\n"
    )
    # No python block (only an untagged one): the fence alone.
    assert prefill_text("Write f.\n```\ndef f(): ...\n```", "starter_code") == "```python\n"


def test_prefill_plus_body_only_completion_is_the_whole_solution():
    prefill = prefill_text("```python\ndef add(x, y):\n    \"\"\"Add.\"\"\"\n```", "starter_code")
    code = extract_python_block(prefill + "    return x + y\n```\nThat's it.\n```python\nraise SystemExit\n```")
    assert code == "def add(x, y):\n    \"\"\"Add.\"\"\"\n    return x + y\n"


def test_prefilled_turn_stops_on_any_fence():
    from swerl.agent.config import AgentConfig
    from swerl.agent.protocols.single_turn import SingleTurn

    plain = SingleTurn(AgentConfig(protocol="single-turn"))
    plain.initial_messages("```python\ndef f(): ...\n```")
    assert (plain.prefill, plain.stop_strings) == ("", ("\n```\n",))
    prefilled = SingleTurn(AgentConfig(protocol="single-turn", single_turn_prefill="starter_code"))
    prefilled.initial_messages("```python\ndef f(): ...\n```")
    assert (prefilled.prefill, prefilled.stop_strings) == ("```python\ndef f(): ...\n", ("```",))
