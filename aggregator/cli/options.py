"""The click options commands share (``--table``, ``--definitions``, ``--endpoint-url``,
``--mode``, ``--window-seconds``, ``--rules``, durations in seconds) and the checks that run on
their values before a command starts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import click

from aggregator.core.exceptions import ConfigError
from aggregator.core.text import quote

if TYPE_CHECKING:
    from aggregator.core.layout import TableLayout

_F = TypeVar("_F", bound=Callable[..., Any])

META_TABLE = "aggregator.table"
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


def check_table_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
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
    ctx.meta[META_TABLE] = value
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


def endpoint_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--endpoint-url",
        envvar="AGGREGATOR_ENDPOINT_URL",
        callback=_check_endpoint_url,
        help="DynamoDB endpoint, e.g. http://127.0.0.1:8000 for DynamoDB Local "
        "[env AGGREGATOR_ENDPOINT_URL]",
    )(f)


def table_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--table",
        "table_name",
        envvar="AGGREGATOR_TABLE_NAME",
        required=True,
        callback=check_table_name,
        help="Table name [env AGGREGATOR_TABLE_NAME]",
    )(f)


class RuleSources(tuple[Path, ...]):
    """The rule files and directories of one or more ``-d`` options, as
    :func:`~aggregator.core.rules.load_rules` takes them; prints as ``a, b``."""

    def __str__(self) -> str:
        return ", ".join(str(p) for p in self)

    def options(self) -> str:
        """``-d a -d b``: the options that name these sources again."""
        return " ".join(f"-d {p}" for p in self)


DEFAULT_RULE_DIRECTORIES = (Path("rules"), Path("definitions"))
"""Where rules are found without ``-d``: ``./rules`` (what ``aggregator init`` writes), else
``./definitions`` (this repository's demo rules)."""


def default_rule_sources() -> RuleSources | None:
    """The first of :data:`DEFAULT_RULE_DIRECTORIES` that exists, or ``None``."""
    for directory in DEFAULT_RULE_DIRECTORIES:
        if directory.is_dir():
            return RuleSources((directory,))
    return None


def rule_sources(
    ctx: click.Context, param: click.Parameter, value: tuple[Path, ...]
) -> RuleSources:
    """``-d`` values (repeatable), or the default rule directory.

    Raises
    ------
    ConfigError
        Without ``-d`` when neither default directory exists, naming the ways to give rules.
    """
    if value:
        return RuleSources(value)
    found = default_rule_sources()
    if found is None:
        raise ConfigError(
            "no rules: give rule files or directories with -d (repeatable) or "
            "AGGREGATOR_DEFINITIONS; without them ./rules or ./definitions is read, and neither "
            "exists here (aggregator init writes a starter rules/)"
        )
    return found


def rule_paths_option(
    help: str,
    *,
    dest: str = "definitions",
    envvar: str | None = None,
    callback: Callable[[click.Context, click.Parameter, tuple[Path, ...]], Any] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``-d``/``--definitions``: rule files or directories, repeatable; passed as ``dest``
    (paths, or what ``callback`` makes of them)."""
    return click.option(
        "--definitions",
        "-d",
        dest,
        envvar=envvar,
        multiple=True,
        callback=callback,
        type=click.Path(path_type=Path),
        help=help,
    )


_DEFINITIONS_ENV = " [env AGGREGATOR_DEFINITIONS, several separated by ':']"


def definitions_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return rule_paths_option(
        "Rule file or directory, repeatable (default: ./rules, else ./definitions)"
        + _DEFINITIONS_ENV,
        envvar="AGGREGATOR_DEFINITIONS",
        callback=rule_sources,
    )(f)


def _optional_rule_sources(
    ctx: click.Context, param: click.Parameter, value: tuple[Path, ...]
) -> RuleSources | None:
    return RuleSources(value) if value else None


def layout_definitions_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``-d`` for commands that need only the table layout (the rules' ``table:`` section):
    optional, the default layout without it."""
    return rule_paths_option(
        "Rule file or directory whose table: section gives the layout, repeatable "
        "(default: ./rules or ./definitions if one exists, else pk/sk and the default names)"
        + _DEFINITIONS_ENV,
        envvar="AGGREGATOR_DEFINITIONS",
        callback=_optional_rule_sources,
    )(f)


def layout_of(definitions: RuleSources | None) -> TableLayout:
    """The table layout declared by the rules at ``definitions``; without ``-d``, the rules of
    :func:`default_rule_sources` when one exists (the other commands' default), else the
    default layout.

    Raises
    ------
    RuleError
        When the rules are invalid.
    """
    from aggregator.core.layout import DEFAULT_LAYOUT
    from aggregator.core.rules import load_rules

    if definitions is None:
        found = default_rule_sources()
        return load_rules(found).layout if found is not None else DEFAULT_LAYOUT
    return load_rules(definitions).layout


def mode_option(f: Callable[..., Any]) -> Callable[..., Any]:
    from aggregator.dynamodb.modes import WRITE_MODES

    return click.option(
        "--mode",
        default=WRITE_MODES[0],
        show_default=True,
        envvar="AGGREGATOR_MODE",
        type=click.Choice(WRITE_MODES),
        help="Write mode [env AGGREGATOR_MODE]",
    )(f)


def window_option(f: Callable[..., Any]) -> Callable[..., Any]:
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


def rules_option(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--rules a,b`` (passed as ``rule_names``: a list, or ``None`` when not given)."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        return click.option("--rules", "rule_names", callback=_rule_list, help=help_text)(f)

    return decorate


def table_rules_options(rules_help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``-d``, ``--table`` and ``--rules`` (with ``rules_help``), in this order: the rules of a
    table that a command (backfill, reconcile) works on, all or some of them."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        return definitions_option(table_option(rules_option(rules_help)(f)))

    return decorate


def seconds_option(flag: str, dest: str, *, default: float, help: str) -> Callable[[_F], _F]:
    """A duration in seconds, 0 or more (a float), its default shown in ``--help``."""
    return click.option(
        flag, dest, type=click.FloatRange(min=0), default=default, show_default=True, help=help
    )
