"""Transcripts split into turns with the parser of each agent protocol."""

from __future__ import annotations

from swerl.report.turns import split_turns


def test_tool_call_replies_become_commands_and_outputs():
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix it"},
                {"role": "assistant", "content": 'Looking.\n<tool_call>{"name": "bash", "arguments": {"command": "ls"}}'
                                                 "</tool_call>"},
                {"role": "tool", "content": "a.py\n[exit code: 0]"},
                {"role": "assistant", "content": "<tool_call>not json</tool_call>"}]
    prompt, turns = split_turns(messages, "tool-call")
    assert prompt == "[system] sys\n\n[user] fix it"
    assert (turns[0].text, turns[0].commands, turns[0].outputs) == ("Looking.", ["ls"], ["a.py\n[exit code: 0]"])
    assert turns[1].commands == [] and "not valid JSON" in turns[1].error


def test_single_turn_shows_the_solution_written_and_unknown_protocols_show_replies_whole():
    reply = "Here it is.\n```python\ndef f(): pass\n```"
    messages = [{"role": "user", "content": "write f"}, {"role": "assistant", "content": reply}]
    (turn,) = split_turns(messages, "single-turn")[1]
    assert turn.text == "Here it is." and turn.commands == ["# written to the solution file\ndef f(): pass\n"]
    (whole,) = split_turns(messages, None)[1]
    assert whole.text == reply and whole.commands == []
