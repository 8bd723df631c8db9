"""Which rules a backfill counts (:class:`~aggregator.operations.backfill.Backfill`): the base
rules named (or every rule pending in the manifest), the derived rules that ride along with
their sources, and the refusals of rules that cannot be backfilled."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from aggregator.core.exceptions import ConfigError
from aggregator.core.lifecycle import RuleState
from aggregator.core.rules import RuleSet

__all__ = [
    "STREAM_RETENTION_SECONDS",
    "NothingToBackfill",
    "RuleSelection",
    "check_states",
    "pending_rules",
    "select_rules",
]

STREAM_RETENTION_SECONDS = 24 * 3600
"""DynamoDB Streams keeps records 24 hours (Developer Guide, "Change data capture for DynamoDB
Streams")."""


class NothingToBackfill(ConfigError):
    """Every rule of the set is backfilled already (active): a backfill has nothing to do,
    which is no failure (the CLI says so and exits 0)."""


@dataclass(frozen=True, slots=True)
class RuleSelection:
    """The rules of one backfill.

    Attributes
    ----------
    base
        The base rules to scan for.
    carried
        Derived rules whose source is among ``base``: they ride along (once their source is
        active nothing could complete them).
    skipped
        Pending derived rules left out, each with the reason (only when no rule was named).
    """

    base: list[str]
    carried: list[str]
    skipped: list[tuple[str, str]]


def select_rules(
    rules: RuleSet, states: dict[str, RuleState], names: Iterable[str] | None
) -> RuleSelection:
    """The base rules to scan for; derived rules whose source is among them ride along
    (:attr:`RuleSelection.carried`), named or not: once their source is active nothing could
    complete them. Without ``names`` (every pending rule), a derived rule whose source is not
    backfilled with it is left out and named in :attr:`RuleSelection.skipped`; named, it is
    refused.

    Raises
    ------
    NothingToBackfill
        Without ``names``, when every rule is active.
    ConfigError
        When no rule is pending (without ``names``), a rule is not defined, not deployed,
        active or only requested, a named derived rule's source is not backfilled with it, or
        no base rule is left.
    """
    known = {r.name for r in rules}
    chosen = pending_rules(rules, states) if names is None else list(dict.fromkeys(names))
    base = [n for n in chosen if n in known and not rules.get(n).is_derived]
    carried: list[str] = []
    skipped: list[tuple[str, str]] = []
    for name in chosen:
        _check_selectable(name, known, states)
        try:
            if _rides_along(rules, name, base):
                carried.append(name)
        except ConfigError as refused:
            if names is not None:
                raise
            skipped.append((name, str(refused)))
    for r in rules:  # pending derived rules of the backfilled sources, not named
        state = states.get(r.name)
        if (
            r.source in base
            and r.name not in carried
            and state is not None
            and state.status in ("pending", "backfilling")
        ):
            carried.append(r.name)
    if not base:
        if skipped:
            raise ConfigError(skipped[0][1])
        raise ConfigError("name at least one base rule to backfill")
    return RuleSelection(base, carried, skipped)


def pending_rules(rules: RuleSet, states: dict[str, RuleState]) -> list[str]:
    """The rules pending a backfill in the manifest (when no names are given).

    Raises
    ------
    NothingToBackfill
        When every rule is deployed and none is pending.
    ConfigError
        When no rule is pending otherwise.
    """
    chosen = [
        r.name
        for r in rules
        if r.name in states and states[r.name].status in ("pending", "backfilling")
    ]
    if not chosen:
        deployed = [r.name for r in rules if r.name in states]
        if deployed and len(deployed) == len(rules):
            raise NothingToBackfill(
                "nothing to backfill: every rule is active (aggregator status shows "
                "each rule's state)"
            )
        raise ConfigError(
            "no rule is pending a backfill (the manifest lists them once the handler or "
            "`aggregator run` has started with them)"
        )
    return chosen


def _check_selectable(name: str, known: set[str], states: dict[str, RuleState]) -> None:
    """Refuse a rule that is not defined, not deployed, already active or only requested.

    Raises
    ------
    ConfigError
        When the rule cannot be backfilled.
    """
    if name not in known:
        raise ConfigError(f"no rule named {name!r} in the definitions")
    state = states.get(name)
    if state is None:
        raise ConfigError(
            f"rule {name!r} is not deployed yet: start the handler (deploy) or "
            "`aggregator run` with it first, so that the stream counts it from its fences"
        )
    if state.status == "active":
        raise ConfigError(f"rule {name!r} is already backfilled (active)")
    if state.status == "requested":
        raise ConfigError(
            f"rule {name!r} was requested by a rebuild, but no handler has started with "
            "its new definition yet: deploy it (or start `aggregator run` with it) first"
        )


def _rides_along(rules: RuleSet, name: str, base: list[str]) -> bool:
    """Whether the rule is derived (its source among ``base``), to be carried along.

    Raises
    ------
    ConfigError
        When the rule is derived from a rule not backfilled with it.
    """
    source = rules.get(name).source
    if source is None:
        return False
    if source not in base:
        raise ConfigError(
            f"rule {name!r} is derived from {source!r}, which is not backfilled with "
            "it: a derived rule is complete when its source's aggregates all came "
            "after it was deployed (backfill them together); deriving from existing "
            "aggregates is not supported yet"
        )
    return True


def check_states(states: dict[str, RuleState], now: float) -> None:
    """Refuse rules counted without fences, or pending for longer than the stream keeps records.

    Raises
    ------
    ConfigError
        For the first such rule.
    """
    for name, state in states.items():
        if state.unfenced:
            raise ConfigError(
                f"rule {name!r} was counted by a handler whose events name no shard (no "
                "tumbling windows), without fences: a backfill could not be exact"
            )
        if state.status == "pending" and now - state.registered_at > (
            STREAM_RETENTION_SECONDS - 3600
        ):
            raise ConfigError(
                f"rule {name!r} has been pending since {time.ctime(state.registered_at)}, "
                "longer than the stream keeps records (24 h): its changes since then cannot "
                "be told apart exactly; deploy it under a new name and backfill that"
            )
