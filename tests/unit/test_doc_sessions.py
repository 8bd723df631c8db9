"""The console-session runner (tests/sessions/runner.py) on pages of its own, with shell commands
only: what it compares, what it reports, what it rewrites."""

from __future__ import annotations

import re
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.sessions.runner import (
    BlockResult,
    Session,
    SessionError,
    merge_output,
    normalize,
    outputs_match,
    parse_console,
    report,
    rewrite,
    run_page,
)

FENCE = "```"


def _page(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text.replace("~~~", FENCE))
    return page


def _run(tmp_path: Path, page: Path) -> list[BlockResult]:
    """The page's blocks as run in a fresh directory ``tmp_path/work<n>``."""
    workdir = Path(tempfile.mkdtemp(prefix="work", dir=tmp_path))
    session = Session(workdir, {"PATH": "/usr/bin:/bin"})
    try:
        return run_page(page, session)
    finally:
        session.close()


def _scripts(tmp_path: Path) -> str:
    """Every script the sessions under ``tmp_path`` ran, as run."""
    return "\n".join(p.read_text() for p in sorted(tmp_path.glob("work*/.session/*.sh")))


def test_a_console_block_is_commands_and_what_each_prints() -> None:
    steps = parse_console("$ echo a \\\n    b\na b\n$ true\n")
    assert [(s.command, s.output) for s in steps] == [
        (["$ echo a \\", "    b"], ["a b"]),
        (["$ true"], []),
    ]
    assert steps[0].script == "echo a \\\n    b"
    with pytest.raises(SessionError, match="starts with a `\\$ ` command"):
        parse_console("reconcile: 1 top list(s) checked\n")


def test_normalization_covers_timings_rates_ids_and_timestamps_only() -> None:
    line = (
        "backfill 5fe2f87320c2: 3943 items scanned in 21 pages (1,386 items/s), 2.8 s; "
        "━━ 2,174 items/s 0:00:01 at 2026-11-22T01:06:00Z"
    )
    other = (
        "backfill 0123456789ab: 3943 items scanned in 21 pages (91 items/s), 1,297.6 s; "
        "━━ - items/s 1:02:03 at 2025-01-01T00:00Z"
    )
    assert normalize(line) == normalize(other)
    # counts are compared as printed
    assert normalize(line) != normalize(line.replace("3943", "3944"))
    # in a session with a clock, timestamps are compared as printed (shifted)
    assert normalize(line, timestamps=False) != normalize(other, timestamps=False)


def test_merging_keeps_the_docs_text_where_only_normalized_fields_differ() -> None:
    documented = ["done in 0.9 s", "3 items", ""]
    actual = ["done in 2.1 s", "4 items", "a new line   "]
    assert not outputs_match(documented, actual, timestamps=True)
    assert merge_output(documented, actual, timestamps=True) == [
        "done in 0.9 s",
        "4 items",
        "a new line",
        "",  # the gap before the next command stays
    ]
    assert outputs_match(["done in 0.9 s", ""], ["done in 1.0 s"], timestamps=True)


def test_a_changed_output_fails_with_a_diff_and_rewriting_records_it(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        """# A page

<!-- session-setup: a file
printf 'one\\ntwo\\n' > numbers.txt
export GREETING=hello
-->
~~~console
$ cat numbers.txt
one
three
$ echo "$GREETING, took 0.5 s"
hello, took 0.1 s
~~~

Prose stays.
""",
    )
    blocks = _run(tmp_path, page)
    assert [b.matches for b in blocks] == [False]
    diff = report(page, blocks)
    assert "-three\n+two" in diff
    changed = [line for line in diff.splitlines()[2:] if line[:1] in "+-"]
    assert changed == ["-three", "+two"]  # a duration is equal to any other
    page.write_text(rewrite(page.read_text(), blocks))
    text = page.read_text()
    assert "one\ntwo\n$ echo" in text and "hello, took 0.1 s" in text  # the docs' duration kept
    assert text.endswith("~~~\n\nProse stays.\n".replace("~~~", FENCE))
    assert [b.matches for b in _run(tmp_path, page)] == [True]


def test_bash_blocks_run_only_when_asked_and_a_failing_step_fails(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        """~~~bash
touch not-run
~~~
<!-- session: run -->
~~~bash
touch ran
~~~
~~~console
$ ls
ran
~~~
""",
    )
    assert [b.matches for b in _run(tmp_path, page)] == [True]
    failing = _page(tmp_path, "<!-- session-setup: a failing step\nfalse\ntouch never\n-->\n")
    with pytest.raises(SessionError, match="the set-up step at line 1 failed"):
        _run(tmp_path, failing)
    stray = _page(tmp_path, "<!-- session: run -->\nno block follows\n")
    with pytest.raises(SessionError, match="with no block after it"):
        _run(tmp_path, stray)


def test_a_port_stands_for_a_free_one_and_background_commands_keep_running(
    tmp_path: Path,
) -> None:
    page = _page(
        tmp_path,
        """<!-- session: port 8000 -->
<!-- session: background -->
~~~console
$ echo "listening on 127.0.0.1:8000" && exec sleep 600
listening on 127.0.0.1:8000
~~~
~~~console
$ echo --port 8000
--port 8000
~~~
""",
    )
    blocks = _run(tmp_path, page)
    assert [b.matches for b in blocks] == [True, True]
    ran = _scripts(tmp_path)
    assert re.search(r"--port (\d+)", ran) and "--port 8000" not in ran


def test_a_clock_runs_at_the_same_minute_of_an_hour_and_shifts_timestamps_back(
    tmp_path: Path,
) -> None:
    page = _page(
        tmp_path,
        """<!-- session: clock 2026-11-22T01:06:00Z -->
~~~console
$ date -u -d @$SESSION_CLOCK +%Y-%m-%dT%H:%M:%SZ; echo 2026-11-22T01:06:00Z
2026-11-22T01:06:00Z
2026-11-22T01:06:00Z
~~~
""",
    )
    blocks = _run(tmp_path, page)
    assert [b.matches for b in blocks] == [True]
    clock = int(re.findall(r"SESSION_CLOCK=(\d+)", _scripts(tmp_path))[0])
    at = datetime.fromtimestamp(clock, UTC)
    assert (at.minute, at.second) == (6, 0)
    assert timedelta(0) <= datetime.now(UTC) - at < timedelta(hours=1)
