"""terminus-2's parser messages, word for word (pure text; the texts are what the seed model saw)."""

import json

from swerl.agent.protocols.terminus2 import split_leading_reasoning
from swerl.agent.protocols.terminus_parser import parse_terminus_reply
from swerl.agent.protocols.terminus_texts import parse_error_message


def _body(**fields):
    base = {"analysis": "a", "plan": "p", "commands": [], "task_complete": False}
    return json.dumps({**base, **fields})


def test_missing_and_invalid_durations_fall_back_to_one_second_with_upstream_words():
    parsed = parse_terminus_reply(_body(commands=[{"keystrokes": "ls\n"}, {"keystrokes": "pwd\n", "duration": "x"}]))
    assert parsed.warnings == ["Command 1: Missing duration field, using default 1.0",
                               "Command 2: Invalid duration value, using default 1.0"]
    assert [c.duration_s for c in parsed.commands] == [1.0, 1.0]


def test_keystroke_errors_use_upstream_words():
    assert parse_terminus_reply(_body(commands=[{"duration": 1}])).error == "Command 1 missing required 'keystrokes' field"
    assert parse_terminus_reply(_body(commands=[{"keystrokes": 3}])).error == "Command 1 'keystrokes' must be a string"
    assert parse_terminus_reply(_body(commands=["ls"])).error == "Command 1 must be an object"


def test_unknown_fields_wrong_order_and_wrong_types_are_warnings():
    text = json.dumps({"plan": 1, "analysis": "a", "commands": [{"keystrokes": "ls\n", "duration": 1, "wait": True}],
                       "task_complete": 2})
    parsed = parse_terminus_reply(text)
    assert parsed.error == ""
    assert parsed.warnings == [
        "Field 'plan' should be a string",
        "Fields appear in wrong order. Found: plan → analysis → commands, expected: analysis → plan → commands",
        "Field 'task_complete' should be a boolean or string",
        "Command 1: Unknown fields: wait",
    ]
    assert parsed.task_complete is True  # a truthy number completes, as upstream


def test_missing_closing_brace_is_fixed_with_the_upstream_note():
    parsed = parse_terminus_reply(_body()[:-1])
    assert parsed.warning_text == (
        "- AUTO-CORRECTED: Fixed incomplete JSON by adding missing closing brace - please fix this in future responses"
    )


def test_mixed_content_fix_takes_the_first_parsable_object():
    reply = 'x } ' + _body(commands=[{"keystrokes": "ls\n", "duration": 0.1}])
    parsed = parse_terminus_reply(reply)  # the stray brace hides the object from the scan
    assert parsed.error == "" and parsed.commands[0].keystrokes == "ls\n"
    assert parsed.warnings[0] == "AUTO-CORRECTED: Extracted JSON from mixed content - please fix this in future responses"


def test_long_invalid_json_shows_a_preview():
    long_text = '{"analysis": "' + "a" * 300 + '", "plan": }'
    error = parse_terminus_reply(long_text).error
    assert error.startswith("Invalid JSON: Expecting value") and " | Content preview: '{\"analysis\": " in error
    assert error.endswith("'...")
    short = parse_terminus_reply('{"analysis": "a", "plan": }').error
    assert short.endswith(""" | Content: '{"analysis": "a", "plan": }'""")


def test_command_error_in_a_completing_reply_is_only_a_warning():
    parsed = parse_terminus_reply(_body(commands=[{"duration": 1}], task_complete=True))
    assert (parsed.error, parsed.task_complete, parsed.commands) == ("", True, [])
    assert parsed.warnings == ["Command 1 missing required 'keystrokes' field"]


def test_task_complete_string_is_not_stripped():
    assert parse_terminus_reply(_body(task_complete="yes")).task_complete is True
    assert parse_terminus_reply(_body(task_complete="true ")).task_complete is False


def test_parse_error_message_matches_terminus2():
    parsed = parse_terminus_reply("I will run ls {\"commands\": []} ok")
    assert parse_error_message(parsed.error, parsed.warning_text) == (
        "Previous response had parsing errors:\nERROR: Missing required fields: analysis, plan\n"
        "WARNINGS: - Extra text detected before JSON object\n- Extra text detected after JSON object\n\n"
        "Please fix these issues and provide a proper JSON response."
    )
    assert parse_error_message("No valid JSON found in response", "") == (
        "Previous response had parsing errors:\nERROR: No valid JSON found in response\n\n"
        "Please fix these issues and provide a proper JSON response."
    )


def test_thinking_before_the_json_is_extra_text_unless_split_off():
    reply = '<think>plan {"x": 1}</think>\n' + _body()
    assert parse_terminus_reply(reply).error == "Missing required fields: analysis, plan, commands"
    assert split_leading_reasoning(reply) == "\n" + _body()
    assert split_leading_reasoning("text <think>a</think>") == "text <think>a</think>"
    assert parse_terminus_reply("<think>fine</think>\n" + _body()).warnings == ["Extra text detected before JSON object"]
