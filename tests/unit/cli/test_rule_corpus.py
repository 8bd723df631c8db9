"""The malformed rule-file corpus (``tests/rule_corpus``) through ``aggregator validate``.

Every file there holds one problem (YAML syntax, alias bombs, deep nesting, bytes that are not
UTF-8, control characters, wrong types, unknown fields, bad match operators, windows, deltas and
keys, empty rule lists, duplicate names, cycles, unknown sources, derived-rule typos, keys too
long for DynamoDB, numbers DynamoDB cannot store...) and says what its message must contain in
``# expect: <text>`` comment lines (and, with ``# expect lines: N``, how many lines it has: a
problem that several rules share through a YAML anchor is one line). A file over 1 MiB is
generated into ``tmp_path``.

All files run in ONE subprocess that limits its own address space (``RLIMIT_AS``, 1.5 GiB) and
gives every file :data:`SECONDS_PER_FILE` (``signal.alarm``): the CLI's ``validate`` command is
invoked in-process through click's ``CliRunner``, and the subprocess reports per file the exit
code, the output, the seconds taken and whether a traceback appeared. The test then asserts, for
every file: exit code 1, every output line starts with ``error:`` or names the file, the message
names the file and contains the expected text (rule and field for rule-level problems), no
traceback and no internal error, and it took less than :data:`SECONDS_PER_FILE`. The shipped
``definitions/`` are the positive control: each validates with exit code 0.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CORPUS = ROOT / "tests" / "rule_corpus"
DEFINITIONS = ROOT / "definitions"

SECONDS_PER_FILE = 5
MEMORY_LIMIT_BYTES = 1536 * 1024 * 1024

# Expectations of files that cannot carry an ASCII "# expect:" comment.
EXTRA_EXPECTATIONS = {
    "bytes_utf16.yaml": [
        "line 1, column 1 (byte 0): byte 0xff is not valid UTF-8",
        "UTF-16 byte order mark",
    ],
}

RUNNER = r"""
import json, resource, signal, sys, time, traceback

limit, seconds, cpu = (int(arg) for arg in sys.argv[1:4])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
# a hang inside native code (where SIGALRM cannot interrupt) still ends
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))

from click.testing import CliRunner
from aggregator.cli import main


class Timeout(BaseException):
    # not an Exception: CliRunner must not swallow it
    pass


def on_alarm(signum, frame):
    raise Timeout()


signal.signal(signal.SIGALRM, on_alarm)
runner = CliRunner()
for path in json.loads(sys.stdin.read()):
    print(json.dumps({"started": path}), flush=True)
    started = time.perf_counter()
    report = {"path": path, "timed_out": False}
    signal.alarm(seconds)
    try:
        result = runner.invoke(main, ["validate", path])
        signal.alarm(0)
        exception = result.exception
        uncaught = exception is not None and not isinstance(exception, SystemExit)
        report.update(
            exit_code=result.exit_code,
            output=result.output,
            exception=repr(exception) if uncaught else None,
            traceback="".join(traceback.format_exception(*result.exc_info)) if uncaught else "",
        )
    except Timeout:
        report.update(timed_out=True, exit_code=None, output="", exception="Timeout",
                      traceback="")
    finally:
        signal.alarm(0)
    report["seconds"] = time.perf_counter() - started
    print(json.dumps(report), flush=True)
"""

WHOLE_RUN_SECONDS = 120
"""CPU seconds and wall-clock seconds for the whole subprocess (a hang fails, never stalls)."""


def run_validate(paths: list[Path]) -> dict[str, dict]:
    """``aggregator validate <path>`` for each path in one memory-limited subprocess; one report
    per path (``exit_code``, ``output``, ``seconds``, ``timed_out``, ``exception``,
    ``traceback``).

    Raises
    ------
    AssertionError
        When the subprocess dies or overruns, naming the file it was on.
    """
    args = [str(MEMORY_LIMIT_BYTES), str(SECONDS_PER_FILE), str(WHOLE_RUN_SECONDS)]
    try:
        completed = subprocess.run(
            [sys.executable, "-c", RUNNER, *args],
            input=json.dumps([str(p) for p in paths]),
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=WHOLE_RUN_SECONDS,
        )
        stdout, stderr, code = completed.stdout, completed.stderr, completed.returncode
    except subprocess.TimeoutExpired as exc:
        stdout, stderr, code = _text(exc.stdout), _text(exc.stderr), "timeout"
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    reports = {line["path"]: line for line in lines if "path" in line}
    unfinished = [line["started"] for line in lines if "started" in line]
    unfinished = [path for path in unfinished if path not in reports]
    assert code == 0 and not unfinished, (
        f"the validating subprocess ended with {code} on {unfinished}: {stderr[-3000:]}"
    )
    return reports


def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def expectations(path: Path) -> list[str]:
    found = re.findall(rb"^# expect: (.*)$", path.read_bytes(), flags=re.MULTILINE)
    return [line.decode("utf-8") for line in found] + EXTRA_EXPECTATIONS.get(path.name, [])


def expected_lines(path: Path) -> int | None:
    """How many output lines the file's ``# expect lines: N`` comment allows (``None``: any),
    for a problem that must be reported once, such as a typo in an anchor several rules merge."""
    found = re.findall(rb"^# expect lines: ([0-9]+)$", path.read_bytes(), flags=re.MULTILINE)
    return int(found[0]) if found else None


def corpus_files() -> list[Path]:
    return sorted(CORPUS.glob("*.yaml"))


def test_corpus_is_large_and_every_file_says_what_to_expect():
    files = corpus_files()
    assert len(files) >= 60
    assert [f.name for f in files if not expectations(f)] == []
    assert sorted(EXTRA_EXPECTATIONS) == sorted(
        name for name in EXTRA_EXPECTATIONS if (CORPUS / name).exists()
    )


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> tuple[dict[str, dict], list[Path], float]:
    huge = tmp_path_factory.mktemp("huge") / "huge.yaml"
    rule = "  - name: r{i}\n    key: K\n    description: " + "x" * 200 + "\n"
    text = "rules:\n" + "".join(rule.format(i=i) for i in range(5000))
    huge.write_text(text)
    assert huge.stat().st_size > 1024 * 1024
    paths = [*corpus_files(), huge, *sorted(DEFINITIONS.glob("*.yaml"))]
    started = time.perf_counter()
    result = run_validate(paths)
    return result, paths, time.perf_counter() - started


def test_every_malformed_file_gives_a_clean_error(reports):
    results, paths, _ = reports
    failures = []
    for path in paths:
        if path.parent == DEFINITIONS:
            continue
        report = results[str(path)]
        problems = []
        output = report["output"]
        if report["timed_out"] or report["seconds"] >= SECONDS_PER_FILE:
            problems.append(f"took {report['seconds']:.1f} s")
        if report["exit_code"] != 1:
            problems.append(f"exit code {report['exit_code']}")
        if report["exception"] or report["traceback"] or "Traceback" in output:
            problems.append(f"uncaught {report['exception']}: {report['traceback'][-2000:]}")
        if "internal error" in output:
            problems.append("internal error")
        lines = [line for line in output.splitlines() if line.strip()]
        if not lines:
            problems.append("no output")
        stray = [line for line in lines if not line.startswith("error:") and str(path) not in line]
        if stray:
            problems.append(f"lines neither 'error:' nor naming the file: {stray[:3]}")
        if str(path) not in output:
            problems.append("the file is not named")
        too_long = [line[:80] for line in lines if len(line) > 1100]
        if too_long:
            problems.append(f"over-long lines: {too_long}")
        wanted = expectations(path) if path.parent == CORPUS else ["1048576-byte (1 MiB) limit"]
        missing = [text for text in wanted if text not in output]
        if missing:
            problems.append(f"missing {missing}")
        count = expected_lines(path) if path.parent == CORPUS else None
        if count is not None and len(lines) != count:
            problems.append(f"{len(lines)} lines, not {count}")
        if problems:
            failures.append(f"{path.name}: {'; '.join(problems)}\n    output: {output[:600]!r}")
    assert failures == []


def test_rule_level_problems_name_the_rule_and_the_field(reports):
    results, _, _ = reports
    for path in corpus_files():
        output = results[str(path)]["output"]
        for text in expectations(path):
            if text.startswith("rule "):
                # "<file>: rule 'x', field 'f': ..." on one line
                line = next(line for line in output.splitlines() if text in line)
                assert re.search(r": rule (#\d+|'.*'), field '.*': ", line), line


def test_huge_file_is_rejected_before_parsing(reports):
    results, paths, _ = reports
    huge = next(p for p in paths if p.name == "huge.yaml")
    report = results[str(huge)]
    assert (
        f"{huge}: the file is {huge.stat().st_size} bytes, over the 1048576-byte"
        in (report["output"])
    )
    assert report["seconds"] < 1


def test_shipped_definitions_validate(reports):
    results, paths, _ = reports
    shipped = [p for p in paths if p.parent == DEFINITIONS]
    assert shipped
    for path in shipped:
        report = results[str(path)]
        assert report["exit_code"] == 0, report["output"]
        assert "rule(s) valid" in report["output"]
        assert not report["traceback"]


def test_whole_corpus_runs_quickly(reports):
    _, paths, seconds = reports
    assert seconds < 60, f"{len(paths)} files took {seconds:.1f} s"


def test_one_granularity_written_alone_is_the_list_of_it(tmp_path):
    """``granularities: hour`` is ``[hour]`` (unambiguous: it names one granularity), and
    ``validate`` shows how it was read; text naming several is refused (the corpus)."""
    from click.testing import CliRunner

    from aggregator.cli import main
    from aggregator.core.rules import load_rules

    alone, listed = tmp_path / "alone.yaml", tmp_path / "listed.yaml"
    rule = "rules:\n  - name: r1\n    key: K\n    window: {{time: ts, unit: epoch_seconds, {}}}\n"
    alone.write_text(rule.format("granularities: hour"))
    listed.write_text(rule.format("granularities: [hour]"))
    assert load_rules(alone).get("r1") == load_rules(listed).get("r1")
    result = CliRunner().invoke(main, ["validate", str(alone)])
    assert result.exit_code == 0, result.output
    assert "per hour of ts" in result.output and "1 rule(s) valid" in result.output
