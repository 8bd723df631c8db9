"""The scale benchmark's own pieces (no servers): arrival times, per-flight keys, the ratio and
the plots."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from aggregator.dev.flights import ReplayStep
from bench.scale import (
    AUTO,
    HOT_AUTO,
    UNSHARDED,
    WIDE,
    WIDE_BASE,
    Figures,
    _auto_line,
    _ratio,
    _rules_flights,
    _rules_wide,
    _wide_line,
    _wide_problem,
    flight_arrival,
    parser,
    per_flight_keys,
    plot,
    wide_likes,
    wide_truth,
)
from bench.write_modes import RunFigures
from bench.write_modes import plot as plot_write_modes
from tests.factories import stream_record

FLIGHT = {"pk": "FLIGHT#2013-01-01#AA1#JFK#7", "sk": "FLIGHT", "time_hour": "2013-01-01T10:00:00Z"}
HOUR = 1357034400  # 2013-01-01T10:00:00Z


def test_a_flights_writes_arrive_in_their_order_around_its_hour():
    scheduled = flight_arrival(stream_record("INSERT", None, {**FLIGHT, "status": "scheduled"}))
    departed = flight_arrival(
        stream_record("MODIFY", {**FLIGHT, "status": "scheduled"}, {**FLIGHT, "status": "departed"})
    )
    deleted = flight_arrival(stream_record("REMOVE", {**FLIGHT, "status": "departed"}))
    assert HOUR - 6 * 3600 <= scheduled < HOUR - 5 * 3600
    assert HOUR <= departed < HOUR + 3600 <= deleted < HOUR + 7200
    assert scheduled < departed < deleted


def test_per_flight_keys_give_each_flight_its_collection():
    step = ReplayStep(date(2013, 1, 1), "schedule", "put", ({"pk": "FLIGHT#d", "sk": "AA1#7"},))
    (out,) = per_flight_keys([step])
    assert out.items == ({"pk": "FLIGHT#d#AA1#7", "sk": "FLIGHT"},)


def test_sharded_rules_are_the_many_writer_ones():
    rules = {r.name: r for r in _rules_flights()}
    assert rules["departures_total"].write_shards == 64
    assert rules["flights_by_plane"].write_shards == 1
    assert rules["flights_by_carrier"].leaderboard_partitions == 4
    assert all(r.write_shards == 1 for r in _rules_flights(sharded=False))
    auto = _rules_flights(auto=True)
    assert all(r.write_shards == ("auto" if r.source is None else 1) for r in auto)
    assert any(r.source is not None for r in auto)
    assert all(r.leaderboard_partitions == 1 for r in auto)  # compared with the unsharded rules


def figures(workload, p, mode, wcu, largest):
    return Figures(
        workload, p, mode, source_records=1000, modelled_wcu=wcu, largest_by_hour=largest
    )


def test_ratio_and_plots(tmp_path):
    runs = [
        figures("flights", 64, "at-least-once", 2000, [100, 100]),
        figures("flights", 64, "exactly-once", 2050, [300, 500]),
        figures(UNSHARDED, 64, "exactly-once", 9000, [3000, 30000]),
        figures("flights", 16, "at-least-once", 2000, [100]),
        figures("flights", 16, "exactly-once", 2000, [200]),
    ]
    assert round(_ratio(runs, 64), 3) == 1.025
    paths = plot(runs, tmp_path)
    assert [p.name for p in paths] == ["scale_wcu.png", "scale_item_size.png"]
    assert all(p.stat().st_size > 1000 for p in paths)
    modes = [RunFigures("at-least-once", 100, "t", modelled_wcu=10, stream_records=100)]
    assert plot_write_modes(modes, tmp_path / "modes.png").stat().st_size > 1000


def test_the_scale_auto_line_compares_auto_with_no_write_sharding():
    auto = figures(AUTO, 64, "exactly-once", 10_100, [100])
    base = figures(UNSHARDED, 64, "exactly-once", 10_000, [100])
    hot = Figures(HOT_AUTO, 64, "exactly-once", throttled_seconds=2, exact=True)
    auto.exact = base.exact = True
    assert _auto_line([auto, hot]) is None  # without the comparison there is no line
    assert _auto_line([auto, base, hot]) == (
        "scale-auto: P=64 flights WCU 1.010 of unsharded; hot keys 2 s over a limit; exact yes"
    )
    hot.exact = False
    assert _auto_line([auto, base, hot]).endswith("exact no")  # type: ignore[union-attr]


def test_the_wide_likes_are_on_distinct_posts_and_counted_apart():
    likes = wide_likes(50_000)
    assert likes[:3] == [("post-0", "user-0"), ("post-7919", "user-1"), ("post-15838", "user-2")]
    assert len({post for post, _ in likes}) == 50_000
    assert len({user for _, user in likes}) == 50_000
    assert wide_likes(100_001)[-1] == ("post-0", "user-0")  # 7,919 * 100,000 wraps to 0
    truth = wide_truth([("post-1", "user-1"), ("post-2", "user-1"), ("post-1", "user-3")])
    assert truth == {
        "likes_per_post": {"post-1": Decimal(2), "post-2": Decimal(1)},
        "likes_per_user": {"user-1": Decimal(2), "user-3": Decimal(1)},
    }


def test_the_wide_rules_carry_the_chosen_layout():
    rules = _rules_wide(64, 8)
    assert (rules.layout.aggregate_partitions, rules.layout.control_partitions) == (64, 8)
    assert {r.name: r.spread for r in rules} == {"likes_per_post": 64, "likes_per_user": 64}
    assert all(r.write_shards == "auto" for r in rules)
    today = _rules_wide()
    assert (today.layout.aggregate_partitions, today.layout.control_partitions) == (1, 1)
    assert all(r.spread == 1 for r in today)


def wide(workload, partitions, hottest, over, exact, keys=100_000):
    return Figures(
        workload,
        64,
        "exactly-once",
        keys=keys,
        hottest_peak=hottest,
        hottest_peak_name="AGGREGATES#7" if partitions > 1 else "AGGREGATES",
        throttled_seconds=over,
        exact=exact,
        aggregate_partitions=partitions,
        control_partitions=8 if partitions > 1 else 1,
    )


def test_the_scale_wide_line_reports_the_spread_run():
    spread = wide(WIDE, 64, 712, 0, True)
    base = wide(WIDE_BASE, 1, 40_366, 5, True)
    assert _wide_line([]) is None
    assert _wide_line([base, spread]) == (
        "scale-wide: P=64 100000 keys at 20000 records/s: partition peak 712 WCU/s; "
        "0 s over a limit; exact yes"
    )
    base.exact = False  # every wide run must be exact
    assert _wide_line([spread, base]).endswith("exact no")  # type: ignore[union-attr]
    # today's layout alone (--aggregate-partitions 1 --control-partitions 1) stands in
    assert _wide_line([base]) == (
        "scale-wide: P=64 100000 keys at 20000 records/s: partition peak 40366 WCU/s; "
        "5 s over a limit; exact no"
    )


def test_wide_options_are_checked():
    def problem(*argv):
        return _wide_problem(parser().parse_args(list(argv)))

    assert problem() is None
    assert problem("--aggregate-partitions", "1", "--control-partitions", "1") is None
    assert problem("--no-wide", "--only-wide") == "--no-wide and --only-wide exclude each other"
    assert problem("--aggregate-partitions", "0") == "--aggregate-partitions: 1 to 100, got 0"
    assert problem("--control-partitions", "33") == "--control-partitions: 1 to 32, got 33"
    assert problem("--wide-seconds", "0").startswith("--wide-seconds:")


def test_a_bad_wide_option_is_one_line_and_exit_2(capsys):
    from bench.scale import main

    assert main(["--control-partitions", "0"]) == 2
    assert capsys.readouterr().out == "error: --control-partitions: 1 to 32, got 0\n"


def test_render_shows_only_the_workloads_that_ran():
    from rich.console import Console

    from bench.scale import render

    console = Console(width=200, record=True)
    render(console, [wide(WIDE, 64, 712, 0, True), wide(WIDE_BASE, 1, 40_366, 5, True)])
    text = console.export_text()
    assert "Flights" not in text and "Hot keys" not in text
    assert "Wide keys, 100,000 keys" in text
    assert "712 (AGGREGATES#7)" in text and "40,366 (AGGREGATES)" in text
