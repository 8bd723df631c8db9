"""``aggregator watch`` without a table: the rules it shows and in which order, a panel whose read
is refused or fails, the titles' ranges, and the view fitted to a short terminal."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from rich.console import Console
from rich.live_render import LiveRender

from aggregator.cli.commands.watch import (
    Panel,
    Row,
    Snapshot,
    chosen_rules,
    collect,
    render,
    span_text,
)
from aggregator.core.exceptions import QueryError, RuleError
from aggregator.core.rules import RuleSet, load_rules
from aggregator.dynamodb.query.results import Aggregate, RollingTop

RULES = """version: 1
rules:
  - name: likes
    match: {type: like}
    key: "{post}"
    leaderboard: true
  - name: likes_hourly
    match: {type: like}
    key: "{post}"
    leaderboard: true
    leaderboard_store: list
    window: {time: ts, unit: epoch_seconds, granularities: [minute, hour], retention: 2h}
  - name: dwell
    match: {type: view}
    key: "{page}"
    delta: {attribute: seconds}
    kind: mean
    window: {time: ts, unit: epoch_seconds, granularities: [minute], retention: 2d}
"""
NOW = 1_357_039_800  # 2013-01-01T11:30:00Z
HOUR = 3_600


@pytest.fixture
def rules(tmp_path: Path) -> RuleSet:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES, encoding="utf-8")
    return load_rules(path)


@dataclass
class _Series:
    buckets: list[Decimal]

    def headlines(self) -> list[Decimal | None]:
        return list(self.buckets)


@dataclass
class FakeStore:
    """The reads of :class:`AggregateStore` that watch makes; ``failures`` maps a method to the
    error it raises; ``asked`` records each rolling top's arguments."""

    failures: dict[str, Exception] = field(default_factory=dict)
    asked: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    read_units: Decimal = Decimal(0)

    def _fail(self, method: str) -> None:
        self.requests += 1
        if method in self.failures:
            raise self.failures[method]

    def top(self, rule: str, n: int) -> list[Aggregate]:
        self._fail("top")
        return [Aggregate(rule, "POST#a", Decimal(3), f"{rule}#POST#a")]

    def rolling_top(self, rule: str, n: int, **asked: Any) -> RollingTop:
        self._fail("rolling_top")
        self.asked.append(asked)
        # the range a rolling top sums: --last widened out to the granularity's boundaries
        size = {"minute": 60, "hour": HOUR}[asked["granularity"]]
        lo = (asked["now"] - asked["last"]) // size * size
        hi = -(-asked["now"] // size) * size
        top = RollingTop(rule, asked["granularity"], lo, hi)
        top.aggregates = [Aggregate(rule, "POST#a", Decimal(2), f"{rule}#POST#a")]
        return top

    def series(self, rule: str, key: str, **asked: Any) -> _Series:
        self._fail("series")
        return _Series([Decimal(0), Decimal(2)])

    def list(self, rule: str) -> list[Aggregate]:
        self._fail("list")
        return []


def test_rules_named_come_in_their_order_and_an_unknown_one_lists_the_known(rules) -> None:
    assert [r.name for r in chosen_rules(rules, ())] == ["likes", "likes_hourly", "dwell"]
    named = chosen_rules(rules, ("dwell", "likes", "dwell"))
    assert [r.name for r in named] == ["dwell", "likes"]
    with pytest.raises(RuleError) as refused:
        chosen_rules(rules, ("likes", "nosuch"))
    assert str(refused.value) == "no rule named 'nosuch'; known rules: likes, likes_hourly, dwell"


def test_a_refused_read_is_its_panels_note_and_a_failed_request_ends_the_view(rules) -> None:
    store = FakeStore(failures={"top": QueryError("rule 'likes': refused for a reason")})
    snapshot = collect(store, list(rules), 4, HOUR)  # type: ignore[arg-type]
    likes, hourly, dwell = snapshot.panels
    assert (likes.rows, likes.note) == ((), "rule 'likes': refused for a reason")
    assert [r.key for r in hourly.rows] == ["POST#a"] and dwell.note == ""

    # a request that failed (its cause is the SDK's error): the whole view's problem
    denied = ClientError({"Error": {"Code": "ResourceNotFoundException"}}, "Query")
    failed = QueryError("Query on 'nosuch' failed")
    failed.__cause__ = denied
    with pytest.raises(QueryError) as ended:
        collect(FakeStore(failures={"series": failed}), list(rules), 4, HOUR)  # type: ignore[arg-type]
    assert ended.value is failed


def test_a_last_of_too_many_buckets_advises_a_shorter_last_and_reads_nothing(rules) -> None:
    store = FakeStore()
    snapshot = collect(store, list(rules), 4, 400 * 86_400)  # type: ignore[arg-type]
    likes, hourly, _ = snapshot.panels
    assert likes.rows and not store.asked  # the rolling top was never asked
    # 400 days of hours, the coarsest buckets the rule keeps: 9,600 + 1 (the current hour);
    # 999 hours widen to at most 1,000 buckets: 41 whole days
    assert hourly.rows == () and hourly.note == (
        "the range holds 9,601 hour buckets, more than a rolling top reads (1,000); "
        "watch a shorter --last (at most 41d)"
    )
    assert "--granularity" not in hourly.note and "coarser" not in hourly.note


def test_titles_give_the_range_summed(rules, monkeypatch) -> None:
    monkeypatch.setattr("aggregator.cli.commands.watch.time.time", lambda: float(NOW))
    store = FakeStore()
    likes, hourly, dwell = collect(store, list(rules), 4, HOUR).panels  # type: ignore[arg-type]
    # an hour of minutes at 11:30:00: [10:30, 11:30), the last hour, no bucket widened
    assert store.asked == [{"granularity": "minute", "last": HOUR, "now": NOW}]
    assert hourly.title == "likes_hourly: top 4, [10:30Z, 11:30Z) (minute buckets)"
    assert dwell.title == "dwell: first 4 keys, [10:30Z, 11:30Z) (mean)"
    assert likes.title == "likes: top 4"
    # two days: hours (2,880 minutes are too many), and the range's dates
    store = FakeStore()
    _, hourly, dwell = collect(store, list(rules), 4, 48 * HOUR).panels  # type: ignore[arg-type]
    assert store.asked[0]["granularity"] == "hour"
    assert hourly.title == (
        "likes_hourly: top 4, [2012-12-30T11:00:00Z, 2013-01-01T12:00:00Z) (hour buckets)"
    )
    assert dwell.title == "dwell: first 4 keys, [2012-12-30T11:30:00Z, 2013-01-01T11:30:00Z) (mean)"


def test_span_text() -> None:
    assert span_text(NOW - 90, NOW + 30) == "[11:28:30Z, 11:30:30Z)"  # buckets of 30 s
    assert span_text(NOW - 86_399, NOW) == "[11:30:01Z, 11:30:00Z)"  # under a day: times
    assert span_text(NOW - 86_400, NOW) == "[2012-12-31T11:30:00Z, 2013-01-01T11:30:00Z)"


def _snapshot(panels: int, rows: int, requests: int = 6) -> Snapshot:
    return Snapshot(
        [
            Panel(
                f"rule{p}",
                f"rule{p}: top {rows}",
                tuple(Row(f"k{r}", Decimal(r)) for r in range(rows)),
            )
            for p in range(panels)
        ],
        requests,
        Decimal(0),
        float(NOW),
    )


def _live_screen(view: Any, height: int, *, terminal: bool = True) -> list[str]:
    """The lines rich's Live shows of ``view`` on a terminal of 80 columns and ``height``
    lines (a LiveRender, as Live draws each refresh, a taller view cut with ``...``); not on a
    terminal, the one Live prints when it stops (the whole view)."""
    out = io.StringIO()
    screen = Console(file=out, width=80, height=height, force_terminal=terminal, color_system=None)
    screen.print(LiveRender(view, vertical_overflow="ellipsis" if terminal else "visible"))
    return [line.rstrip() for line in out.getvalue().rstrip("\n").split("\n")]


def test_a_short_terminal_shows_the_panels_that_fit_a_count_of_the_others_and_the_footer() -> None:
    # three panels of 4 keys: each 9 lines (title, 3 of header, 4 rows, the bottom border)
    view = render(_snapshot(3, 4), None, digits=2, refreshes=1, total_requests=6)
    lines = _live_screen(view, 24)
    assert len(lines) == 20
    assert lines[0] == "rule0: top 4" and lines[9] == "rule1: top 4"
    assert lines[-2] == "1 more panel: make the terminal taller, or name fewer rules"
    assert lines[-1] == "11:30:00Z  refresh 1: 6 read requests; 6 in all  (q or Ctrl-C to leave)"
    assert "..." not in lines
    # tall enough: everything, no count
    assert len(_live_screen(view, 28)) == 28 and "more panel" not in "".join(_live_screen(view, 28))
    # 10 lines: one panel, and the two others counted
    lines = _live_screen(view, 11)
    assert lines[0] == "rule0: top 4" and len(lines) == 11
    assert lines[-2].startswith("2 more panels: ")
    # not even the first panel fits: its first lines, the count, the footer
    lines = _live_screen(view, 6)
    assert lines[0] == "rule0: top 4" and len(lines) == 6
    assert lines[-2].startswith("2 more panels: ") and lines[-1].endswith("(q or Ctrl-C to leave)")
    # piped (no terminal): all of it, whatever the height
    assert len(_live_screen(view, 10, terminal=False)) == 28


def test_the_footer_counts_in_words() -> None:
    view = render(_snapshot(1, 1, requests=1), None, digits=2, refreshes=3, total_requests=1_234)
    footer = _live_screen(view, 24)[-1]
    assert footer == "11:30:00Z  refresh 3: 1 read request; 1,234 in all  (q or Ctrl-C to leave)"
