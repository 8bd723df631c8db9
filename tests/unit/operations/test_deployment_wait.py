"""How a rebuild waits for a handler to take its requested generation up
(aggregator.operations.rebuild._DeploymentWait): pauses, progress calls, and what it returns."""

from __future__ import annotations

from aggregator.core.lifecycle import RuleState, RuleStatus
from aggregator.operations.rebuild import _DeploymentWait

NAME = "per_owner@2"


def state(status: RuleStatus) -> RuleState:
    return RuleState(NAME, "f" * 16, status, registered_at=0)


def run(seconds: float, statuses: list[RuleStatus]) -> tuple[RuleState, list[float], list[float]]:
    """Wait with 5-second polls; the manifest reads ``statuses`` one per load (then the last)."""
    sleeps: list[float] = []
    waits: list[float] = []
    reads = iter(statuses)
    last = state(statuses[-1])

    def load() -> dict[str, RuleState]:
        return {NAME: state(next(reads, last.status))}

    wait = _DeploymentWait(seconds, 5.0, lambda name, waited: waits.append(waited), sleeps.append)
    return wait.until_taken_up(state("requested"), load), sleeps, waits


def test_returns_the_state_once_a_handler_took_it_up() -> None:
    # requested at the first read after a pause, pending at the second
    taken, sleeps, waits = run(60, ["requested", "pending"])
    assert taken.status == "pending"
    assert sleeps == [5.0, 5.0]
    assert waits == [0.0, 5.0]  # called before each pause, with the seconds waited so far


def test_gives_up_after_its_seconds_the_last_pause_shortened() -> None:
    taken, sleeps, waits = run(12, ["requested"])
    assert taken.status == "requested"
    assert sleeps == [5.0, 5.0, 2.0]  # 12 seconds in all, never more
    assert waits == [0.0, 5.0, 10.0]


def test_zero_seconds_returns_at_once() -> None:
    taken, sleeps, waits = run(0, ["pending"])
    assert (taken.status, sleeps, waits) == ("requested", [], [])
