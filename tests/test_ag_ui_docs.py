"""docs/protocols/ag-ui.md as pasted: its Python example runs and prints what the page says."""

from __future__ import annotations

from tests.docs_text import PAGES, code_blocks, run_pasted

PAGE = PAGES["docs/protocols/ag-ui.md"]


def test_the_example_runs_as_pasted(database_url, tmp_path):
    [snippet] = code_blocks(PAGE, "python")
    done = run_pasted(snippet, database_url, tmp_path, name="ag_ui_example.py")
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    assert printed == [
        "['RUN_STARTED', 'TOOL_CALL_START', 'TOOL_CALL_ARGS', 'TOOL_CALL_END', 'RUN_FINISHED']",
        "tool_approval c1",
        "['RUN_STARTED', 'TOOL_CALL_RESULT', 'TEXT_MESSAGE_START', 'TEXT_MESSAGE_CONTENT', "
        "'TEXT_MESSAGE_END', 'STATE_SNAPSHOT', 'RUN_FINISHED']",
        "Done: paid 20",
    ]
    flowing = " ".join(PAGE.split())
    for line in printed:
        assert f"`{line}`" in flowing  # the page says what the example prints
