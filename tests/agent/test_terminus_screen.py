"""terminus-2's pane diff and tmux command building (pure text; real panes are in test_terminus2)."""

from swerl.sandbox.runtime.tmux import MAX_SEND_KEYS_COMMAND_CHARS, find_new_content, send_keys_commands

PROMPT = "root@0123456789ab:/app#"


def test_diff_of_a_one_line_screen_starts_at_the_old_prompt():
    previous = f"{PROMPT}\n\n\n"
    current = f"{PROMPT} ls\nfile\n{PROMPT}\n\n"
    assert find_new_content(previous, current) == current


def test_diff_uses_the_offset_of_the_previous_last_newline():
    previous = f"boot\n{PROMPT}\n\n"
    current = f"boot\n{PROMPT} ls\nfile\n{PROMPT}\n"
    assert find_new_content(previous, current) == f"\n{PROMPT} ls\nfile\n{PROMPT}\n"


def test_diff_is_none_when_the_previous_screen_is_gone():
    assert find_new_content("old text\nthat scrolled", f"{PROMPT}\n") is None


def test_unchanged_screen_diffs_to_its_last_line():
    screen = f"{PROMPT} ls\nfile\n{PROMPT}\n\n"
    assert find_new_content(screen, screen).strip() == PROMPT


def test_keys_are_quoted_and_long_keys_split_under_the_tmux_limit():
    assert send_keys_commands(["echo 'a b'\n", "C-c"]) == ["tmux send-keys -t terminus-2 'echo '\"'\"'a b'\"'\"'\n' C-c"]
    commands = send_keys_commands(["x" * 40_000])
    assert len(commands) == 3 and all(len(c) <= MAX_SEND_KEYS_COMMAND_CHARS for c in commands)
    assert "".join(c.split(" ", 4)[4].strip("'") for c in commands) == "x" * 40_000
