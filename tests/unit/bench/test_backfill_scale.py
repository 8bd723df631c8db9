"""The backfill-scale benchmark's own pieces: the estimate lines, the issue's last line, the twin
hook, bad input, and the 1 KB items it measures on."""

from __future__ import annotations

import pytest

from aggregator.dynamodb.sizes import typed_item_size
from aggregator.operations.backfill.cost import BackfillCostInputs, estimate
from bench import backfill_scale
from bench.backfill_scale import (
    TwinFigures,
    estimate_lines,
    main,
    measure_scan_cpu,
    sample_items,
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
    assert len(lines) == 3 and all(line.startswith("estimate: ") for line in lines)
    sixteen = estimate(inputs.with_(workers=16))
    assert f"16 workers: {sixteen.hours:.2f} h, ${sixteen.total_dollars:,.2f}" in lines[0]
    assert "1,000 workers:" in lines[1]
    total = estimate(inputs)
    assert lines[2].startswith(
        f"estimate: total for 64 workers: {total.hours:.2f} h, ${total.total_dollars:,.2f} = "
    )


def test_with_no_twin_it_prints_the_estimate_only(capsys):
    assert main(["--items", "1000000", "--worker-counts", "4,8", "--no-twin"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("estimate: 1,000,000 items, 4 workers: ")
    assert not any(line.startswith("backfill-scale:") for line in lines)


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
    assert main(["--invocation-seconds", "901"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("backfill-scale: error: invocation_seconds") and err.count("\n") == 1


def test_it_measures_on_1_kb_items():
    sizes = [typed_item_size(item) for item in sample_items(50)]
    assert all(1000 <= size <= 1100 for size in sizes), sizes
    assert measure_scan_cpu(page_items=50, repeats=1) > 0
