"""The ``aggregator`` command (click + rich): the ``main`` group and its commands.

Commands: ``init``, ``build``, ``validate``, ``filter-criteria``, ``template``, ``local``,
``create-table``, ``check-table``, ``prepare-table``, ``move-control-items``, ``run``,
``backfill``, ``reconcile``, ``rebuild``, ``drop-rule``, ``status``, ``explain``,
``query get|list|top|histogram|window``, ``dead-letters``, ``replay-dead-letters``, ``demo``.
Every command runs through :class:`~aggregator.cli.boundary.AggregatorGroup`, which turns any error
into one line on stderr and an exit code.
"""

from __future__ import annotations

import click

from aggregator.cli.boundary import AggregatorGroup
from aggregator.cli.commands.backfill import backfill_cmd
from aggregator.cli.commands.deadletters import dead_letters_cmd, replay_dead_letters_cmd
from aggregator.cli.commands.demo import demo
from aggregator.cli.commands.explain import explain_cmd
from aggregator.cli.commands.lifecycle import drop_rule_cmd, rebuild_cmd
from aggregator.cli.commands.local import create_table_cmd, local
from aggregator.cli.commands.project import build_cmd, init_cmd
from aggregator.cli.commands.query import query
from aggregator.cli.commands.reconcile import reconcile_cmd
from aggregator.cli.commands.rules import filter_criteria_cmd, template_cmd, validate
from aggregator.cli.commands.run import run
from aggregator.cli.commands.status import status_cmd
from aggregator.cli.commands.table import (
    check_table_cmd,
    move_control_items_cmd,
    prepare_table_cmd,
)
from aggregator.cli.commands.watch import watch_cmd


@click.group(cls=AggregatorGroup)
@click.version_option(package_name="ddb-aggregator")
def main() -> None:
    """ddb-aggregator: live aggregates inside one DynamoDB table, from its stream."""


main.add_command(init_cmd)
main.add_command(build_cmd)
main.add_command(validate)
main.add_command(filter_criteria_cmd)
main.add_command(template_cmd)
main.add_command(local)
main.add_command(create_table_cmd)
main.add_command(check_table_cmd)
main.add_command(prepare_table_cmd)
main.add_command(move_control_items_cmd)
main.add_command(run)
main.add_command(backfill_cmd)
main.add_command(reconcile_cmd)
main.add_command(rebuild_cmd)
main.add_command(drop_rule_cmd)
main.add_command(status_cmd)
main.add_command(explain_cmd)
main.add_command(query)
main.add_command(watch_cmd)
main.add_command(dead_letters_cmd)
main.add_command(replay_dead_letters_cmd)
main.add_command(demo)
