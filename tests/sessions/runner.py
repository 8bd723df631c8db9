"""Run the documentation's console sessions and compare their output with the docs' text.

Every ```` ```console ```` block of a page under ``docs/`` is a session: lines starting with
``$ `` are commands (a line ending with ``\\`` continues on the next), the lines after a command
are what it prints (stdout and stderr as a terminal shows them, in order). The blocks of one
page run in order in one ``bash`` (``cd`` and ``export`` carry over, as in a terminal), in a
scratch directory holding ``.venv`` (the virtualenv running the tests) and ``definitions``, with
the virtualenv's ``bin`` first on ``PATH`` and ``AGGREGATOR_ENDPOINT_URL`` set to the test's
DynamoDB Local (its URL shows as ``http://127.0.0.1:8000`` in the output). Commands run as
subprocesses, as users type them.

Set-up a reader does not need to see is declared in HTML comments next to the block (hidden on
GitHub and on the site, reviewed with the page), read with sybil's markdown lexers:

``<!-- session-setup: ... -->``
    shell lines run at that point (output not compared; a failure fails the test).
``<!-- session: run -->``
    the next ```` ```bash ```` block runs too (output not compared; a failure fails the test).
``<!-- session: background -->``
    the next console block's one command keeps running (another terminal): its output is what
    it printed until it was quiet for a second; it is stopped with SIGINT (Ctrl-C) at the end.
``<!-- session: port 8000 -->``
    ``8000`` stands for a free port: replaced in what runs, the port put back in what it prints.
``<!-- session: minute 30 -->``
    if fewer than 30 seconds of the current minute remain, wait for the next minute: the stream
    runner's tumbling windows (60 s, on the records' insertion time, as Lambda's) split batches
    at minute boundaries, so a run over records written across one prints other counts of
    invocations and aggregate updates; steps that must fall within one minute come after it.
``<!-- session: clock 2026-11-22T01:06:00Z -->``
    the session runs at the latest time ``T`` no later than now with that minute and second
    (so hour and minute buckets fall the same way): the text stands for ``T`` in what runs,
    ``SESSION_CLOCK`` holds ``T`` in epoch seconds for set-up steps, and every timestamp printed
    is shifted back by the same whole number of hours.

Output is compared after :data:`NORMALIZED` (durations, rates, a progress bar's times, backfill
ids, a run's number of invocations, and timestamps in sessions without a clock). With
``AGGREGATOR_UPDATE_SESSIONS=1`` (``make docs-sessions``) the pages are rewritten instead: each
output line whose normalized text is unchanged keeps the docs' text, the others take the run's.
"""

from __future__ import annotations

import difflib
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sybil import Document, Example, Region
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, FencedCodeBlockLexer

from aggregator.dev.local import SHORT_LIVED_JVM_OPTIONS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
UPDATE_VARIABLE = "AGGREGATOR_UPDATE_SESSIONS"
COMMAND_TIMEOUT = 300.0
"""Seconds one command (or set-up step) may take before the session fails."""
DOCUMENTED_ENDPOINT = "http://127.0.0.1:8000"
"""How the sessions' DynamoDB Local (``AGGREGATOR_ENDPOINT_URL``) shows in their output."""
QUIET_SECONDS = 1.0
"""A background command's output is complete once it has been quiet this long."""

NORMALIZED: tuple[tuple[re.Pattern[str], str], ...] = (
    # a rate: "1,386 items/s" ("-" before the first page)
    (re.compile(r"(?:[\d,]+(?:\.\d+)?|-) items/s\b"), "<rate> items/s"),
    # a duration: "0.9 s", "1,297.6 s"
    (re.compile(r"(?<![\w.,])[\d,]+(?:\.\d+)? s\b"), "<duration> s"),
    # a progress bar's elapsed and remaining time: "0:00:01"
    (re.compile(r"\b\d+:\d\d:\d\d\b"), "<h:mm:ss>"),
    # a backfill's id: "backfill 5fe2f87320c2:"
    (re.compile(r"\bbackfill [0-9a-f]{12}\b"), "backfill <id>"),
    # how many invocations a run took: its 60 s tumbling windows follow the records' creation
    # times (DynamoDB Local rounds them down to the minute), so records that straddle a minute,
    # such as a table's genesis and the items written after it, make one invocation more, as
    # Lambda would; what they count is compared exactly
    (re.compile(r"\bin \d+ invocations\b"), "in <n> invocations"),
)
"""What may differ between two runs of a session: pattern and the placeholder compared."""
TIMESTAMP = re.compile(
    r"\b(\d{4}-\d\d-\d\dT\d\d:\d\d)(:\d\d(?:\.\d+)?)?(Z|[+-]\d\d:\d\d)?(?![\d:])"
)
"""A timestamp (ISO 8601): normalized in sessions without a clock, shifted in those with one."""


SESSION_PAGE = re.compile(r"^(```console|<!--+\s*session)", re.MULTILINE)
"""A page with a console block or a session directive."""


class SessionError(Exception):
    """A session could not run as written (a failed set-up step, a malformed block)."""


def normalize(line: str, timestamps: bool = True) -> str:
    """``line`` with what may differ between runs replaced by placeholders (trailing spaces
    dropped)."""
    for pattern, placeholder in NORMALIZED:
        line = pattern.sub(placeholder, line)
    if timestamps:
        line = TIMESTAMP.sub("<timestamp>", line)
    return line.rstrip()


# ---------------------------------------------------------------------- the blocks' text


@dataclass
class Step:
    """One command of a console block and the lines the docs show for it."""

    command: list[str]
    """The command's lines as written, ``$ `` included (continuation lines too)."""
    output: list[str] = field(default_factory=list)

    @property
    def script(self) -> str:
        return "\n".join(self.command)[2:]


def parse_console(text: str) -> list[Step]:
    """The steps of a console block's text.

    Raises
    ------
    SessionError
        When the block does not start with a command.
    """
    steps: list[Step] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            command = [line]
            while command[-1].endswith("\\") and i + 1 < len(lines):
                i += 1
                command.append(lines[i])
            steps.append(Step(command))
        elif not steps:
            raise SessionError(
                f"a console block starts with a `$ ` command (got {line!r}): output without its "
                "command is not a session (use a ```text block)"
            )
        else:
            steps[-1].output.append(line)
        i += 1
    if not steps:
        raise SessionError("an empty console block")
    return steps


def _split_trailing_blank(lines: list[str]) -> tuple[list[str], list[str]]:
    end = len(lines)
    while end and not lines[end - 1].strip():
        end -= 1
    return lines[:end], lines[end:]


def merge_output(documented: list[str], actual: list[str], timestamps: bool) -> list[str]:
    """The output lines to write: the docs' line where its normalized text is the run's, the
    run's line elsewhere; blank lines ending the docs' output (a gap before the next command)
    are kept."""
    documented, gap = _split_trailing_blank(documented)
    actual, _ = _split_trailing_blank([line.rstrip() for line in actual])
    a = [normalize(line, timestamps) for line in documented]
    b = [normalize(line, timestamps) for line in actual]
    merged: list[str] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        merged += documented[i1:i2] if tag == "equal" else actual[j1:j2]
    return merged + gap


def outputs_match(documented: list[str], actual: list[str], timestamps: bool) -> bool:
    documented, _ = _split_trailing_blank(documented)
    actual, _ = _split_trailing_blank(actual)
    return [normalize(line, timestamps) for line in documented] == [
        normalize(line, timestamps) for line in actual
    ]


# ---------------------------------------------------------------------- the shell


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Session:
    """One page's terminal: a ``bash`` fed one command at a time, plus the commands kept
    running in the background; :meth:`close` stops them all."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.files = workdir / ".session"
        self.files.mkdir(parents=True)
        self.shell = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=workdir,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.steps = 0
        self.to_run: list[tuple[re.Pattern[str], str]] = []
        self.to_doc: list[tuple[re.Pattern[str], str]] = []
        self.clock_shift: timedelta | None = None
        self.background: list[subprocess.Popen[bytes]] = []
        self.pending: str | None = None
        self.blocks: list[BlockResult] = []
        # the test's DynamoDB Local shows as the usual one (some commands print the endpoint)
        endpoint = env.get("AGGREGATOR_ENDPOINT_URL", "")
        if endpoint.startswith("http://127.0.0.1:"):
            self.show_as(endpoint, DOCUMENTED_ENDPOINT)

    # substitutions -------------------------------------------------------------------------

    def substitute(self, documented: str, run: str) -> None:
        """``documented`` stands for ``run``: replaced in what runs, put back in the output."""
        self.to_run.append((re.compile(rf"(?<![\w.]){re.escape(documented)}(?!\w)"), run))
        self.show_as(run, documented)

    def show_as(self, run: str, documented: str) -> None:
        """``run`` is shown as ``documented`` in the output (only)."""
        self.to_doc.append((re.compile(rf"(?<![\w.]){re.escape(run)}(?!\w)"), documented))

    def set_clock(self, documented: str) -> None:
        shown = datetime.fromisoformat(documented.replace("Z", "+00:00"))
        now = datetime.now(UTC).replace(microsecond=0)
        # the latest time no later than now at the same minute and second of an hour
        at = now.replace(minute=shown.minute, second=shown.second)
        if at > now:
            at -= timedelta(hours=1)
        self.clock_shift = shown - at
        self.to_run.append((re.compile(re.escape(documented)), at.strftime("%Y-%m-%dT%H:%M:%SZ")))
        self.run(f"export SESSION_CLOCK={int(at.timestamp())}", "the clock")

    def runnable(self, text: str) -> str:
        for pattern, replacement in self.to_run:
            text = pattern.sub(replacement, text)
        return text

    def as_documented(self, text: str) -> str:
        for pattern, replacement in self.to_doc:
            text = pattern.sub(replacement, text)
        if self.clock_shift is not None:
            shift = self.clock_shift

            def shifted(match: re.Match[str]) -> str:
                minutes, seconds, zone = match.groups()
                when = datetime.fromisoformat(f"{minutes}{seconds or ''}{zone or ''}") + shift
                return (
                    when.strftime("%Y-%m-%dT%H:%M")
                    + (when.strftime(":%S") if seconds else "")
                    + (zone or "")
                )

            text = TIMESTAMP.sub(shifted, text)
        return text

    # running ------------------------------------------------------------------------------

    def execute(self, script: str, timeout: float = COMMAND_TIMEOUT) -> tuple[str, int]:
        """Run ``script`` (substituted) in the session's shell, stdin from ``/dev/null``;
        returns its output (stdout and stderr merged) and exit status."""
        self.steps += 1
        path = self.files / f"{self.steps}.sh"
        out = self.files / f"{self.steps}.out"
        path.write_text(self.runnable(script) + "\n")
        assert self.shell.stdin is not None and self.shell.stdout is not None
        self.shell.stdin.write(f'. {path} </dev/null >{out} 2>&1; echo "done $?"\n')
        self.shell.stdin.flush()
        ready, _, _ = select.select([self.shell.stdout], [], [], timeout)
        line = self.shell.stdout.readline() if ready else ""
        output = out.read_text(errors="replace") if out.exists() else ""
        if not line.startswith("done "):
            reason = f"timed out after {timeout:g} s" if not ready else "the shell exited"
            raise SessionError(f"{reason} running:\n{script}\noutput so far:\n{output}")
        return output, int(line.split()[1])

    def run(self, script: str, what: str) -> str:
        """Run a set-up step; its output, or :class:`SessionError` when it fails."""
        output, status = self.execute(script)
        if status:
            raise SessionError(f"{what} exited {status}:\n{script}\n---\n{output}")
        return output

    def run_strictly(self, script: str, what: str) -> str:
        """Run ``script`` as a set-up step under ``set -e``: the first command that fails stops
        it, and the session (the shell exits)."""
        try:
            return self.run(f"set -e\n{script}\nset +e", what)
        except SessionError as exc:
            raise SessionError(f"{what} failed: {exc}") from None

    def start_background(self, script: str, timeout: float = 120.0) -> str:
        """Start ``script`` in the shell's environment and directory, in a process group of
        its own; returns what it printed until quiet for :data:`QUIET_SECONDS`."""
        state = self.run("env -0; printf '\\0'; pwd", "reading the shell's environment")
        *variables, cwd = state.rstrip("\n").split("\0")
        env = dict(v.split("=", 1) for v in variables if "=" in v)
        out = self.files / f"background-{len(self.background)}.out"
        with open(out, "wb") as sink:
            process = subprocess.Popen(
                # SIGINT back to its default first: a shell ignores the signals it was started
                # with ignored (a suite run as a background job is), and Ctrl-C must stop this
                [sys.executable, "-c", _DEFAULT_SIGINT_EXEC, self.runnable(script)],
                cwd=cwd.strip() or self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.background.append(process)
        deadline = time.monotonic() + timeout
        size, changed = 0, time.monotonic()
        while True:
            now = time.monotonic()
            current = out.stat().st_size
            if current != size:
                size, changed = current, now
            elif size and now - changed >= QUIET_SECONDS:
                break
            if process.poll() is not None:
                break
            if now > deadline:
                raise SessionError(f"no output within {timeout:g} s from:\n{script}")
            time.sleep(0.05)
        return out.read_text(errors="replace")

    def close(self) -> None:
        for process in self.background:
            _stop(process, signal.SIGINT)
        if self.shell.stdin is not None:
            self.shell.stdin.close()
        _stop(self.shell, signal.SIGTERM)


_DEFAULT_SIGINT_EXEC = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execvp('bash', ['bash', '-c', sys.argv[1]])"
)
"""Run ``bash -c ARGV[1]`` with SIGINT at its default action (``python -c`` this, the script)."""


def _stop(process: subprocess.Popen[Any], sig: signal.Signals) -> None:
    """Stop a process group this module started (its leader is ``process``)."""
    if process.poll() is None:
        os.killpg(process.pid, sig)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


# ---------------------------------------------------------------------- sybil's side


@dataclass
class BlockResult:
    """A console block as the docs show it and as this run printed it."""

    line: int
    start: int
    end: int
    documented: str
    recorded: str
    matches: bool


@dataclass(frozen=True)
class Directive:
    name: str
    arguments: str
    source: str


def _session(example: Example) -> Session:
    session = example.namespace.get("session")
    if not isinstance(session, Session):
        raise SessionError("no session: run the page through run_page()")
    return session


def _evaluate_directive(example: Example) -> None:
    session = _session(example)
    directive: Directive = example.parsed
    if directive.name == "session-setup":
        session.run_strictly(directive.source, f"the set-up step at line {example.line}")
        return
    word, _, rest = directive.arguments.partition(" ")
    if word in ("background", "run"):
        session.pending = word
    elif word == "port":
        session.substitute(rest.strip(), str(free_port()))
    elif word == "clock":
        session.set_clock(rest.strip())
    elif word == "minute":
        left = 60 - time.time() % 60
        if left < float(rest):
            time.sleep(left)
    else:
        raise SessionError(f"line {example.line}: unknown session directive {word!r}")


def _evaluate_bash(example: Example) -> None:
    session = _session(example)
    if session.pending != "run":
        return  # an instruction, not part of the session
    session.pending = None
    session.run_strictly(str(example.parsed), f"the bash block at line {example.line}")


def _evaluate_console(example: Example) -> None:
    session = _session(example)
    source: str = str(example.parsed)
    start = example.region.start + example.parsed.offset
    if example.document.text[start : start + len(source)] != source:
        raise SessionError(f"line {example.line}: a console block must not be indented")
    steps = parse_console(source)
    background, session.pending = session.pending == "background", None
    timestamps = session.clock_shift is None
    recorded: list[str] = []
    matches = True
    for step in steps:
        if background:
            if len(steps) != 1:
                raise SessionError(f"line {example.line}: a background block has one command")
            output = session.start_background(step.script)
        else:
            output, _ = session.execute(step.script)
        actual = session.as_documented(output).splitlines()
        matches &= outputs_match(step.output, actual, timestamps)
        recorded += step.command + merge_output(step.output, actual, timestamps)
    session.blocks.append(
        BlockResult(
            line=example.line,
            start=start,
            end=start + len(source),
            documented=source,
            recorded="\n".join(recorded) + "\n",
            matches=matches,
        )
    )


def _directive_parser(document: Document) -> Iterable[Region]:
    lexer = DirectiveInHTMLCommentLexer(directive=r"session-setup|session", arguments=".*?")
    for region in lexer(document):
        region.parsed = Directive(
            region.lexemes["directive"], region.lexemes["arguments"], str(region.lexemes["source"])
        )
        region.evaluator = _evaluate_directive
        yield region


def _fenced_parser(language: str, evaluator: Callable[[Example], None]) -> Any:
    lexer = FencedCodeBlockLexer(language=language)

    def parse(document: Document) -> Iterable[Region]:
        for region in lexer(document):
            region.parsed = region.lexemes["source"]
            region.evaluator = evaluator
            yield region

    return parse


PARSERS = (
    _directive_parser,
    _fenced_parser("console", _evaluate_console),
    _fenced_parser("bash", _evaluate_bash),
)


def pages(part: int | None = None) -> list[Path]:
    """The pages with console sessions (or session directives); ``part`` 0 or 1: every other
    one (the two test modules, so that pytest-xdist runs them on two workers)."""
    found = sorted(p for p in DOCS.rglob("*.md") if SESSION_PAGE.search(p.read_text()))
    return found if part is None else found[part::2]


def run_page(path: Path, session: Session) -> list[BlockResult]:
    """Run every session step of the page at ``path`` in ``session``, in order; returns its
    console blocks as documented and as recorded."""
    document = Document.parse(str(path), *PARSERS)
    document.namespace["session"] = session
    for example in document.examples():
        example.evaluate()
    if session.pending is not None:
        raise SessionError(f"{path}: `session: {session.pending}` with no block after it")
    return session.blocks


def rewrite(text: str, blocks: list[BlockResult]) -> str:
    """``text`` with each console block's source replaced by what the run recorded."""
    for block in sorted(blocks, key=lambda b: b.start, reverse=True):
        text = text[: block.start] + block.recorded + text[block.end :]
    return text


def report(path: Path, blocks: list[BlockResult]) -> str:
    """A unified diff of each block that differs: the docs' text, then this run's."""
    relative = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    parts: list[str] = []
    for block in blocks:
        if block.matches:
            continue
        parts += difflib.unified_diff(
            block.documented.splitlines(),
            block.recorded.splitlines(),
            f"{relative}:{block.line} (the docs)",
            "this run",
            lineterm="",
        )
    return "\n".join(parts)


def check_page(page: Path, endpoint_url: str, workdir: Path) -> None:
    """Run the sessions of ``page`` in ``workdir`` (a scratch directory) against DynamoDB Local
    at ``endpoint_url``; with ``AGGREGATOR_UPDATE_SESSIONS`` set, rewrite the page with what they
    printed, else fail (``pytest.fail``) with the diff of each block that differs."""
    import pytest

    # the scratch directory as a user's project: the virtualenv and the demo's rule files
    (workdir / ".venv").symlink_to(sys.prefix)
    (workdir / "definitions").symlink_to(ROOT / "definitions")
    import boto3

    client = boto3.client(
        "dynamodb",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    before = set(client.list_tables()["TableNames"])
    session = Session(workdir, session_environment(endpoint_url))
    try:
        blocks = run_page(page, session)
    finally:
        session.close()
        # the next page makes tables of the same names
        for name in set(client.list_tables()["TableNames"]) - before:
            client.delete_table(TableName=name)
    if os.environ.get(UPDATE_VARIABLE):
        page.write_text(rewrite(page.read_text(), blocks))
        return
    differences = report(page, blocks)
    if differences:
        pytest.fail(
            f"the console sessions of {page.relative_to(ROOT)} print something else now "
            f"(re-record them all with `make docs-sessions`, then review the diff):\n"
            f"{differences}",
            pytrace=False,
        )


def session_environment(endpoint_url: str) -> dict[str, str]:
    """The environment a session starts with: a user's shell with the virtualenv active."""
    bin_dir = Path(sys.prefix) / "bin"
    keep = ("HOME", "JAVA_HOME", "TMPDIR", "USER")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        LANG="C.UTF-8",
        TZ="UTC",
        TERM="dumb",
        PYTHONPATH=str(ROOT),  # set-up steps import tests.sessions.data
        AGGREGATOR_ENDPOINT_URL=endpoint_url,
        AGGREGATOR_DYNAMODB_LOCAL_DIR=os.environ.get("AGGREGATOR_DYNAMODB_LOCAL_DIR")
        or str(ROOT / ".cache" / "dynamodb-local"),
        # a DynamoDB Local a session starts (`aggregator local`) runs as the suite's do (the JVM
        # reads this itself; its note "Picked up JAVA_TOOL_OPTIONS" goes to the server's log)
        JAVA_TOOL_OPTIONS=" ".join(SHORT_LIVED_JVM_OPTIONS),
    )
    return env
