"""The backfill-scale benchmark's own pieces: the estimate lines, the issue's last line, the twin
hook, bad input, and the 1 KB items it measures on."""

from __future__ import annotations

import pytest

from aggregator.dynamodb.sizes import typed_item_size
from aggregator.operations.backfill.cost import BackfillCostInputs, estimate
from bench import backfill_scale
from bench.backfill_scale import (
    Measured,
    TwinFigures,
    estimate_lines,
    main,
    measure,
    sample_items,
    total_line,
    twin_line,
)


def test_the_last_line_has_the_issues_format():
    figures = TwinFigures(256, 64, 12345.4, 181.6, True)
    assert twin_line(figures) == (
        "backfill-scale: 256 segments, 64 workers: 12,345 items/s, worker peak memory 182 MB, "
        "exact yes"
    )
    assert twin_line(TwinFigures(300, 8, 10, 50, False)).endswith("exact no")


def test_one_estimate_line_per_worker_count_then_the_total_for_the_default():
    inputs = BackfillCostInputs(workers=64)
    lines = estimate_lines(inputs, (16, 1000))
    assert len(lines) == 4 and all(line.startswith("estimate: ") for line in lines)
    sixteen = estimate(inputs.with_(workers=16))
    assert f"16 workers: {sixteen.hours:.2f} h, ${sixteen.total_dollars:,.2f}" in lines[0]
    assert "1,000 workers:" in lines[1]
    total = estimate(inputs)
    assert lines[2] == total_line(total)
    fence, scan = (total.phase(n).seconds / 3600 for n in ("fence", "scan"))
    assert lines[2].startswith(
        f"estimate: total for 64 workers: {total.hours:.2f} h (fence {fence:.2f}, scan {scan:.2f}, "
    )
    assert f"${total.total_dollars:,.2f} = reads " in lines[2]
    assert lines[3] == f"estimate: warning: {total.warnings[0]}"


def test_with_no_twin_it_prints_the_estimate_only(capsys):
    assert main(["--items", "1000000", "--worker-counts", "4,8", "--no-twin"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == estimate_lines(BackfillCostInputs(items=1_000_000, workers=64), (4, 8))
    assert lines[0].startswith("estimate: 1,000,000 items, 4 workers: ")
    assert lines[2].startswith("estimate: total for 64 workers: ")
    # a day of 1,000 writes a second: the fence's catch-up outlasts an invocation
    assert lines[3].startswith("estimate: warning: a shard's fence read takes ")
    assert not any(line.startswith("backfill-scale:") for line in lines)


def test_warnings_follow_the_total():
    lines = estimate_lines(BackfillCostInputs(retained_seconds=600), (16,))
    assert len(lines) == 2  # ten minutes of writes: no warning
    lines = estimate_lines(BackfillCostInputs(), (16,))
    assert [line.split(":")[1] for line in lines[2:]] == [" warning"]


def test_measure_replaces_the_models_measured_figures(capsys, monkeypatch):
    figures = Measured(1000.0, 50.0, 20.0, 1e6, 1e5, 1e5, 5000.0, 50_000.0)
    monkeypatch.setattr(backfill_scale, "measure", lambda: figures)
    assert main(["--measure", "--worker-counts", "16", "--no-twin"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == figures.line()
    inputs = BackfillCostInputs(
        scan_cpu_items_per_second=1000,
        s_entry_bytes=50,
        partial_bytes=20,
        join_skip_entries_per_second=1e6,
        join_decode_entries_per_second=1e5,
        reduce_entries_per_second=1e5,
        stream_parse_records_per_second=5000,
        stream_evaluate_records_per_second=50_000,
    )
    assert lines[2] == total_line(estimate(inputs))


def test_a_twins_figures_end_the_output_and_set_the_exit_status(capsys, monkeypatch):
    figures = TwinFigures(256, 16, 5000, 120, False)
    monkeypatch.setattr(backfill_scale, "run_twin", lambda args: figures)
    assert main(["--worker-counts", "16"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == twin_line(figures)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--items", "0"], "must be at least 1"),
        (["--changing-share", "2"], "a share is 0 to 1"),
        (["--worker-counts", "16,x"], "not a whole number"),
    ],
)
def test_bad_options_fail_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_inputs_the_model_refuses_fail_in_one_line(capsys):
    assert main(["--timeout-seconds", "901"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("backfill-scale: error: lambda_timeout_seconds")
    assert err.count("\n") == 1
    assert main(["--segments", "20000", "--join-buckets", "9999"]) == 2
    assert "over 30,000" in capsys.readouterr().err


def test_it_measures_the_code_on_1_kb_items():
    sizes = [typed_item_size(item) for item in sample_items(50)]
    assert all(1000 <= size <= 1100 for size in sizes), sizes
    figures = measure(page_items=50, pages=2, buckets=4, repeats=1)
    assert all(value > 0 for value in vars(figures).values())
    # an S entry holds a 16-byte digest (32 hex digits before zlib) and the aggregate's name
    assert 10 < figures.s_entry_bytes < 200
    assert 1 < figures.partial_bytes < 200
