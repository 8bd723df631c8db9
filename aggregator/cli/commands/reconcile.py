"""``reconcile``: compare the rules' aggregates with the rules over the table's items, report
the drift and optionally repair it (:mod:`aggregator.operations.reconcile`)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import click

from aggregator.cli.options import RuleSources, endpoint_option, seconds_option, table_rules_options
from aggregator.cli.output import console

if TYPE_CHECKING:
    from aggregator.operations.reconcile import Drift


@click.command("reconcile", short_help="Recount the rules from a scan and report any drift.")
@table_rules_options(
    "Comma-separated base rules to check (default: every base rule; all must be active in the "
    "manifest, or there is no manifest)."
)
@click.option("--repair", is_flag=True, help="Add each stable drift's difference, once.")
@seconds_option(
    "--settle",
    "settle_seconds",
    default=90.0,
    help="Seconds between the two checks of a differing key: longer than the handler takes to "
    "apply a change (the template's tumbling window is 60 s); doubled when a checked rule has "
    "write_shards.",
)
@endpoint_option
def reconcile_cmd(
    definitions: RuleSources,
    table_name: str,
    rule_names: list[str] | None,
    repair: bool,
    settle_seconds: float,
    endpoint_url: str | None,
) -> None:
    """Recompute the rules from a strongly consistent scan and compare with the stored
    aggregates: a table of drifting keys (expected, stored, difference) and totals; exit 1 on
    drift (with --repair: on drift that could not be repaired). A key that moved during the check
    is reported as moving, never repaired. Keys of target rules whose target item does not exist
    (an expected state: their deltas go to the rule's ledger) are counted on a line of their
    own, not drift, and never waited on. The top lists of leaderboard_store: list rules are
    then checked against their aggregates (and with --repair written again from them)."""
    from rich.table import Table

    from aggregator.cli.tables import rules_for_table
    from aggregator.operations.reconcile import reconcile

    client, rules = rules_for_table(table_name, definitions, endpoint_url)
    report = reconcile(
        rules,
        client,
        table_name,
        rule_names=rule_names,
        repair=repair,
        settle_seconds=settle_seconds,
    )
    if report.drifts:
        table = Table()
        for column in ("rule", "key", "expected", "stored", "difference", "status"):
            table.add_column(
                column,
                justify="right" if column in ("expected", "stored", "difference") else "left",
            )
        for d in report.drifts:
            expected, stored, difference = f"{d.expected:,}", f"{d.stored:,}", f"{d.difference:+,}"
            if d.expected_count is not None and d.stored_count is not None:
                # a mean's sum and count: both are compared, and repaired together
                expected += f" / count {d.expected_count:,}"
                stored += f" / count {d.stored_count:,}"
                difference += f" / count {d.expected_count - d.stored_count:+,}"
            table.add_row(d.rule, d.key, expected, stored, difference, d.status)
        console.print(table)
    counts = {s: sum(d.status == s for d in report.drifts) for s in ("drift", "moving", "repaired")}
    console.print(
        f"reconcile: {report.keys_checked} keys checked over {report.items_scanned} items "
        f"({report.checks} check(s)): {counts['drift']} drifting, {counts['moving']} moving, "
        f"{counts['repaired']} repaired",
        highlight=False,
    )
    if report.missing_targets:
        console.print(missing_targets_line(report.missing_targets), highlight=False)
    if report.lists_checked:
        if report.list_drifts:
            lists = Table()
            for column in ("rule", "top list", "wrong keys", "status"):
                lists.add_column(column, justify="right" if column == "wrong keys" else "left")
            for ld in report.list_drifts:
                lists.add_row(ld.rule, ld.partition, f"{ld.wrong:,}", ld.status)
            console.print(lists)
        states = {
            s: sum(d.status == s for d in report.list_drifts)
            for s in ("drift", "moving", "repaired")
        }
        console.print(
            f"reconcile: {report.lists_checked} top list(s) checked: {states['drift']} "
            f"drifting, {states['moving']} moving, {states['repaired']} repaired",
            highlight=False,
        )
    if not report.clean:
        raise SystemExit(1)


def missing_targets_line(missing: list[Drift]) -> str:
    """The line counting the keys whose target item does not exist, per rule: an expected
    state, not drift.

    >>> from decimal import Decimal
    >>> from aggregator.operations.reconcile import Drift
    >>> gone = Drift("like_tally", "POST#gone#META", Decimal(2), Decimal(0), "no target")
    >>> print(missing_targets_line([gone, gone]))
    reconcile: 2 key(s) of like_tally whose target item does not exist: expected, not drift (their deltas go to the ledger: aggregator query list like_tally)
    """  # noqa: E501
    per_rule = Counter(d.rule for d in missing)
    counted = " and ".join(
        f"{n} key(s) of {name}" if i == 0 else f"{n} of {name}"
        for i, (name, n) in enumerate(per_rule.items())
    )
    where = "the ledger" if len(per_rule) == 1 else "the ledgers"
    listed = next(iter(per_rule)) if len(per_rule) == 1 else "RULE"
    return (
        f"reconcile: {counted} whose target item does not exist: expected, not drift (their "
        f"deltas go to {where}: aggregator query list {listed})"
    )
