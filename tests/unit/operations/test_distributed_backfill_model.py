"""A pure model of the distributed backfill's protocol (:mod:`aggregator.operations.backfill.
distributed`), checked before it was built and kept as its specification.

One table of items, a fence, writes racing a parallel scan whose workers are killed (their
uncommitted pages read again later), the handler counting every post-fence record, and the
collector reading the records in order. The claim: the handler's deltas plus the scan's amounts
plus the join's corrections equal the rule over the final items, whenever the collector has read
every record written before the scan ended; and each weaker variant (no corrections, a collector
that stops early, corrections without the scanned contributions) is wrong in some runs, so the
test can fail.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

State = tuple[str, str, int] | None
"""An item's state: ``(group, status, weight)``, or ``None`` while it does not exist."""


def contribution(state: State) -> dict[str, int]:
    """The rule: per group, the weights of the items whose status is ``D`` (so some writes
    change nothing it counts, and some items count nothing)."""
    if state is None or state[1] != "D":
        return {}
    return {state[0]: state[2]}


@dataclass
class Run:
    """One simulated backfill: the results of the protocol's parts."""

    truth: Counter[str] = field(default_factory=Counter)
    handler: Counter[str] = field(default_factory=Counter)
    scan: Counter[str] = field(default_factory=Counter)
    scanned: dict[int, dict[str, int]] = field(default_factory=dict)
    """S entries: the committed scan's contribution of each item it returned (non-empty only)."""
    records: list[tuple[int, State, State]] = field(default_factory=list)
    """Post-fence records ``(key, old, new)`` in stream order (one shard: per item, in order)."""
    scan_ended_at: int = 0
    """Records written before the scan ended."""


def simulate(seed: int, keys: int = 24, segments: int = 3) -> Run:
    """Write, scan (with kills), and record; returns what each part saw."""
    rnd = random.Random(seed)
    table: dict[int, State] = {}

    def write(run: Run | None) -> None:
        k = rnd.randrange(keys)
        old = table.get(k)
        if old is not None and rnd.random() < 0.25:
            new: State = None
        else:
            new = (rnd.choice("ab"), rnd.choice("DS"), rnd.randint(1, 3))
        if new is None:
            table.pop(k, None)
        else:
            table[k] = new
        if run is not None:
            run.records.append((k, old, new))

    for _ in range(rnd.randint(0, 60)):  # history before the fence: nobody counts it
        write(None)
    run = Run()
    # each key in one segment, each segment in a fixed order (DynamoDB's hash order)
    order: list[list[int]] = [[] for _ in range(segments)]
    for k in rnd.sample(range(keys), keys):
        order[rnd.randrange(segments)].append(k)
    position = [0] * segments  # committed
    pending: list[list[tuple[int, State]]] = [[] for _ in range(segments)]
    while any(position[s] < len(order[s]) for s in range(segments)):
        roll = rnd.random()
        s = rnd.randrange(segments)
        if roll < 0.45:
            write(run)
        elif roll < 0.85:  # a page of one item: read, not yet committed
            at = position[s] + len(pending[s])
            if at < len(order[s]):
                k = order[s][at]
                if k in table:
                    pending[s].append((k, table[k]))
                else:
                    pending[s].append((k, None))
        elif roll < 0.95:  # commit the segment's pages read so far
            for k, state in pending[s]:
                c = contribution(state)
                run.scan.update(c)
                if c:
                    run.scanned[k] = c
            position[s] += len(pending[s])
            pending[s] = []
        else:  # the worker is killed: its uncommitted pages are read again later
            pending[s] = []
    run.scan_ended_at = len(run.records)
    for _ in range(rnd.randint(0, 20)):  # the application goes on writing
        write(run)
    for _, old, new in run.records:  # the handler: every post-fence record, once
        run.handler.update(contribution(new))
        run.handler.subtract(contribution(old))
    for state in table.values():
        run.truth.update(contribution(state))
    return run


def first_changes(records: list[tuple[int, State, State]]) -> dict[int, dict[str, int]]:
    """The collector's B entries: per item, the contribution of the ``OldImage`` of its first
    record that changes the rule's contribution."""
    first: dict[int, dict[str, int]] = {}
    for k, old, new in records:
        if k not in first and contribution(old) != contribution(new):
            first[k] = contribution(old)
    return first


def corrections(run: Run, first: dict[int, dict[str, int]]) -> Counter[str]:
    """The join: per item with a B entry, ``c(old_k) - c(scanned_k)`` (0 when never scanned)."""
    total: Counter[str] = Counter()
    for k, old in first.items():
        total.update(old)
        total.subtract(run.scanned.get(k, {}))
    return total


def backfilled(run: Run, extra: Counter[str]) -> dict[str, int]:
    total = Counter(run.handler)
    total.update(run.scan)
    total.update(extra)
    return {g: v for g, v in total.items() if v}


def truth(run: Run) -> dict[str, int]:
    return {g: v for g, v in run.truth.items() if v}


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 40))
def test_exact_when_the_collector_reads_past_the_scan_end(seed: int, beyond: int) -> None:
    run = simulate(seed)
    cut = min(len(run.records), run.scan_ended_at + beyond)  # any point past the scan's end
    assert backfilled(run, corrections(run, first_changes(run.records[:cut]))) == truth(run)


def test_each_weaker_variant_is_wrong_in_some_runs() -> None:
    wrong = Counter[str]()
    for seed in range(300):
        run = simulate(seed)
        expected = truth(run)
        if backfilled(run, Counter()) != expected:
            wrong["no corrections"] += 1
        early = first_changes(run.records[: run.scan_ended_at // 2])
        if backfilled(run, corrections(run, early)) != expected:
            wrong["collector stops before the scan's end"] += 1
        first = first_changes(run.records)
        unscanned_only: Counter[str] = Counter()
        for k, old in first.items():
            if k not in run.scanned:
                unscanned_only.update(old)
        if backfilled(run, unscanned_only) != expected:
            wrong["corrections without the scanned contributions"] += 1
    assert set(wrong) == {
        "no corrections",
        "collector stops before the scan's end",
        "corrections without the scanned contributions",
    }, wrong
