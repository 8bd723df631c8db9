"""The CloudWatch dashboard's body (aggregator.deploy.dashboard): its widgets, a line of
modelled WCU per rule, and only the metrics the handler and AWS publish."""

from __future__ import annotations

import json
from pathlib import Path

from aggregator.core.rules import load_rules
from aggregator.deploy.dashboard import DASHBOARD_VARIABLES, dashboard_body, dashboard_widgets

ROOT = Path(__file__).resolve().parents[3]
TWO_RULES = "version: 1\nrules:\n  - {name: likes, key: k}\n  - {name: views, key: k}\n"


def test_the_widgets_and_a_line_per_rule(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(TWO_RULES, encoding="utf-8")
    widgets = dashboard_widgets(load_rules(path))
    titles = [w["properties"]["title"] for w in widgets]
    assert titles == [
        "Iterator age (ms)",
        "Records and batches per minute",
        "Dead letters",
        "Modelled WCU per rule",
        "Throttles",
        "Duration (ms, left) and errors (right)",
    ]
    (wcu,) = [w for w in widgets if w["properties"]["title"] == "Modelled WCU per rule"]
    assert wcu["properties"]["metrics"] == [
        ["DdbAggregator", "ModelledWCUByRule", "service", "${Service}", "Rule", "likes"],
        ["DdbAggregator", "ModelledWCUByRule", "service", "${Service}", "Rule", "views"],
        ["DdbAggregator", "ModelledWCU", "service", "${Service}"],
    ]
    # a count of errors is not drawn against milliseconds: it has the right axis
    (duration,) = [w for w in widgets if w["properties"]["title"].startswith("Duration")]
    axes = {m[1]: m[-1].get("yAxis", "left") for m in duration["properties"]["metrics"]}
    assert axes == {"Duration": "left", "Errors": "right"}
    # two a row, 12 wide, none overlapping
    assert {(w["x"], w["y"]) for w in widgets} == {(x, y) for x in (0, 12) for y in (0, 6, 12)}


class _Sink:
    """Takes the metrics emit_metrics adds (the handler's EMF names)."""

    namespace = "DdbAggregator"
    default_dimensions: dict[str, str] = {}

    def __init__(self) -> None:
        self.names: set[str] = set()

    def add_metric(self, name: str, unit: object, value: float) -> None:
        self.names.add(name)


def _published() -> set[str]:
    from aggregator.runtime.outcome import BatchOutcome
    from aggregator.runtime.telemetry import emit_metrics

    sink = _Sink()
    emit_metrics(sink, BatchOutcome(response={}), [])
    return sink.names


def test_the_body_names_only_its_variables_and_metrics_that_are_published() -> None:
    rules = load_rules(ROOT / "definitions")
    body = dashboard_body(rules)
    names = {part.split("}")[0] for part in body.split("${")[1:]}
    assert names == {*DASHBOARD_VARIABLES, "AWS::Region"}
    metrics = [m for w in json.loads(body)["widgets"] for m in w["properties"]["metrics"]]
    published = _published() | {"ModelledWCUByRule"}  # the handler's EMF
    for metric in metrics:
        namespace, name = metric[0], metric[1]
        if namespace == "DdbAggregator":
            assert name in published, name
        else:
            assert (namespace, name) in {
                ("AWS/Lambda", "IteratorAge"),
                ("AWS/Lambda", "Invocations"),
                ("AWS/Lambda", "Throttles"),
                ("AWS/Lambda", "Duration"),
                ("AWS/Lambda", "Errors"),
                ("AWS/DynamoDB", "WriteThrottleEvents"),
                ("AWS/DynamoDB", "ReadThrottleEvents"),
            }
    rule_lines = [m for m in metrics if m[1] == "ModelledWCUByRule"]
    assert sorted(m[-1] for m in rule_lines) == sorted(r.name for r in rules)


def test_each_rule_is_charged_its_own_writes_its_top_lists_included() -> None:
    from aggregator.dynamodb.costs import WriteObservation
    from aggregator.dynamodb.top_list_items import top_sort_key
    from aggregator.runtime.telemetry import RuleWcu

    def observed(sort_key: str, wcu: int, index_wcu: int = 0) -> WriteObservation:
        return WriteObservation(0.0, "AGGREGATES", sort_key, wcu, 100, None, index_wcu)

    seen: list[str] = []
    by_rule = RuleWcu(lambda o: seen.append(o.sort_key))
    by_rule(observed("board#ann", 1, 2))
    by_rule(observed("board@2#bob", 1))  # a rebuilt generation counts for its rule
    by_rule(observed(top_sort_key("board"), 3))  # its top list
    by_rule(observed(top_sort_key("board#hour#2026-11-28T07:00:00Z"), 1))
    by_rule(observed("other#x", 1))
    assert by_rule.drain() == {"board": 8, "other": 1}
    assert by_rule.drain() == {}
    assert len(seen) == 5  # the observer it was chained to sees every write
