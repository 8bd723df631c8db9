"""The click options commands share (``--table``, ``--definitions``, ``--endpoint-url``,
``--mode``, ``--window-seconds``) and the checks that run on their values before a command
starts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import click

from aggregator.core.exceptions import ConfigError
from aggregator.core.text import quote

if TYPE_CHECKING:
    from aggregator.core.layout import TableLayout

_META_TABLE = "aggregator.table"
"""Key of the click context's ``meta`` holding the ``--table`` name, for error messages."""


def _option_label(ctx: click.Context, param: click.Parameter) -> str:
    """``--table``, or ``--table (from AGGREGATOR_TABLE_NAME)`` when the value came from there."""
    label = param.opts[0] if param.opts else str(param.name)
    envvar = getattr(param, "envvar", None)
    if (
        param.name is not None
        and isinstance(envvar, str)
        and ctx.get_parameter_source(param.name) == click.core.ParameterSource.ENVIRONMENT
    ):
        label += f" (from {envvar})"
    return label


def _check_table_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Validate a table name option before anything runs, and note it for error messages.

    Raises
    ------
    ConfigError
        When the name breaks DynamoDB's naming rules.
    """
    if value is None:
        return None
    from aggregator.dynamodb.table import validate_table_name

    try:
        validate_table_name(value)
    except ConfigError as exc:
        raise ConfigError(f"{_option_label(ctx, param)}: {exc}") from None
    ctx.meta[_META_TABLE] = value
    return value


def _check_endpoint_url(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> str | None:
    """Reject an ``--endpoint-url`` that is not an http(s) URL with a host.

    Raises
    ------
    ConfigError
        When the value is not such a URL.
    """
    if not value:
        return None
    parts = urlsplit(value)
    try:
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a port that is not a number in 0..65535
        valid = False
    if not valid:
        raise ConfigError(
            f"{_option_label(ctx, param)}: {quote(value)} is not an http(s) URL with a host; "
            "e.g. http://127.0.0.1:8000 for DynamoDB Local"
        )
    return value


def _endpoint_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--endpoint-url",
        envvar="AGGREGATOR_ENDPOINT_URL",
        callback=_check_endpoint_url,
        help="DynamoDB endpoint, e.g. http://127.0.0.1:8000 for DynamoDB Local "
        "[env AGGREGATOR_ENDPOINT_URL]",
    )(f)


def _table_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--table",
        "table_name",
        envvar="AGGREGATOR_TABLE_NAME",
        required=True,
        callback=_check_table_name,
        help="Table name [env AGGREGATOR_TABLE_NAME]",
    )(f)


def _definitions_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--definitions",
        "-d",
        envvar="AGGREGATOR_DEFINITIONS",
        default="definitions",
        show_default=True,
        type=click.Path(path_type=Path),
        help="Rule file or directory [env AGGREGATOR_DEFINITIONS]",
    )(f)


def _layout_definitions_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``-d`` for commands that need only the table layout (the rules' ``table:`` section):
    optional, the default layout without it."""
    return click.option(
        "--definitions",
        "-d",
        envvar="AGGREGATOR_DEFINITIONS",
        default=None,
        type=click.Path(path_type=Path),
        help="Rule file or directory whose table: section gives the layout (default: "
        "./definitions if it exists, else pk/sk and the default names) [env "
        "AGGREGATOR_DEFINITIONS]",
    )(f)


def layout_of(definitions: Path | None) -> TableLayout:
    """The table layout declared by the rules at ``definitions``; without ``-d``, the rules in
    ``./definitions`` when that directory exists (the other commands' default), else the default
    layout.

    Raises
    ------
    RuleError
        When the rules are invalid.
    """
    from aggregator.core.layout import DEFAULT_LAYOUT
    from aggregator.core.rules import load_rules

    if definitions is None:
        default = Path("definitions")
        return load_rules(default).layout if default.is_dir() else DEFAULT_LAYOUT
    return load_rules(definitions).layout


def _mode_option(f: Callable[..., Any]) -> Callable[..., Any]:
    from aggregator.dynamodb.modes import WRITE_MODES

    return click.option(
        "--mode",
        default=WRITE_MODES[0],
        show_default=True,
        envvar="AGGREGATOR_MODE",
        type=click.Choice(WRITE_MODES),
        help="Write mode [env AGGREGATOR_MODE]",
    )(f)


def _window_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--window-seconds",
        default=60,
        show_default=True,
        type=click.IntRange(0, 900),
        help="Emulate Lambda tumbling windows of this length (0: none; the exactly-once modes "
        "need them for the shard id)",
    )(f)


def _rule_list(ctx: click.Context, param: click.Parameter, value: str | None) -> list[str] | None:
    if value is None:
        return None
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise click.BadParameter("name at least one rule, e.g. --rules a,b")
    return names


def _rules_option(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--rules a,b`` (passed as ``rule_names``: a list, or ``None`` when not given)."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        return click.option("--rules", "rule_names", callback=_rule_list, help=help_text)(f)

    return decorate
