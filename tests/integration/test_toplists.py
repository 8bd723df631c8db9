"""Top-list items (aggregator.dynamodb.top_list_items) on DynamoDB Local, against a plain sort.

Several stream shards (threads, each with its own ``TopLists``: separate Lambda environments
with separate memories) merge the new values of their keys into the same lists at once, in
batches; keys move from one shard to another between rounds (a shard's children, processed after
it, by another environment whose memory is older); a batch is merged twice now and then (a
delivery again). After every round, every ``top(n)`` the stored lists prove equals a plain sort
of the values the merged records carry.
"""

from __future__ import annotations

import random
import threading
import zlib
from decimal import Decimal

import pytest

from aggregator.core.layout import TableLayout
from aggregator.core.top_list_merge import exact_top, latest
from aggregator.dynamodb.top_list_items import TOP_PREFIX, TopLists, decode, top_sort_key
from tests.integration.harness import SOAK

pytestmark = pytest.mark.integration

LAYOUT = TableLayout()
KEYS = [f"N{i:03d}" for i in range(16)]


def _plain_top(values: dict[str, Decimal], n: int) -> list[tuple[Decimal, str]]:
    return sorted(((v, k) for k, v in values.items() if v), key=lambda e: (-e[0], e[1]))[:n]


EXAMPLES = 40 if SOAK else 8


def _partition(key: str, partitions: list[str]) -> str:
    return partitions[zlib.crc32(key.encode()) % len(partitions)]


@pytest.mark.parametrize("seed", range(EXAMPLES))
def test_concurrent_merges_keep_every_proved_top_a_plain_sort(ddb, table, seed: int) -> None:
    name, _ = table
    rng = random.Random(seed)
    keep = rng.choice([3, 5, 8])
    partitions = [f"scores#{p}" for p in range(rng.choice([1, 2]))]
    shards = 3
    environments = [TopLists(ddb, name, LAYOUT, keep=keep) for _ in range(shards + 1)]
    value = dict.fromkeys(KEYS, 0)
    merged: dict[str, Decimal] = {}
    wcu = 0
    lock = threading.Lock()
    for round_ in range(6):
        owner = {k: rng.randrange(shards) for k in KEYS}  # the key's shard this round
        streams: list[list[tuple[str, Decimal | None]]] = [[] for _ in range(shards)]
        for _ in range(rng.randrange(10, 60)):
            key = rng.choice(KEYS)
            value[key] += rng.randint(-2, 3)
            gone = value[key] == 0 and rng.random() < 0.5
            streams[owner[key]].append((key, None if gone else Decimal(value[key])))
        plans = [[(rng.randint(1, 8), rng.random() < 0.2) for _ in range(len(s))] for s in streams]
        errors: list[BaseException] = []

        def shard(
            index: int,
            stream: list[tuple[str, Decimal | None]],
            plan: list[tuple[int, bool]],
            errors: list[BaseException],
            round_: int,
        ) -> None:
            nonlocal wcu
            # one of several environments, so that memories go stale
            lists = environments[(index + round_) % len(environments)]
            try:
                at = step = 0
                while at < len(stream):
                    size, again = plan[step]
                    batch = latest(stream[at : at + size])
                    for _ in range(2 if again else 1):
                        for p in partitions:
                            mine = {
                                k: v for k, v in batch.items() if _partition(k, partitions) == p
                            }
                            result = lists.merge(p, mine)
                            with lock:
                                wcu += result.modelled_wcu
                    at, step = at + size, step + 1
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [
            threading.Thread(target=shard, args=(i, streams[i], plans[i], errors, round_))
            for i in range(shards)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for stream in streams:
            for key, v in stream:
                merged[key] = v or Decimal(0)
        stored = environments[0].read(partitions)
        for n in (1, 2, keep, keep + 1):
            top = exact_top(list(stored.values()), n)
            if top is not None:
                assert top == _plain_top(merged, n), (n, stored)
        for p, one in stored.items():  # the invariant itself
            assert len(one.entries) <= keep
            for key, v in merged.items():
                if _partition(key, partitions) != p:
                    continue
                if key in one.entries or (v and (one.floor is None or v > one.floor)):
                    assert one.entries.get(key) == v, (key, v, one)
    assert wcu > 0
    for p in partitions:  # the next example starts from no list
        ddb.delete_item(TableName=name, Key=LAYOUT.item_key(LAYOUT.control_pk, top_sort_key(p)))


def test_item_shape_and_a_stale_memory(ddb, table) -> None:
    name, _ = table
    a = TopLists(ddb, name, LAYOUT, keep=2)
    b = TopLists(ddb, name, LAYOUT, keep=2)
    first = a.merge("r", {"x": Decimal(5), "y": Decimal(3), "z": Decimal(1)})
    assert first.changed and first.writes == 1 and first.reads == 1  # a read the missing item
    item = ddb.get_item(TableName=name, Key=LAYOUT.item_key(LAYOUT.control_pk, top_sort_key("r")))[
        "Item"
    ]
    assert item["top"] == {"M": {"x": {"N": "5"}, "y": {"N": "3"}}}
    assert item["floor"] == {"N": "1"}
    first = int(item["v"]["N"])  # a random start: a list written again starts elsewhere
    assert LAYOUT.sort_key_of(item).startswith(TOP_PREFIX)
    # b lists z (above nothing it knows of? it reads first), then a, whose memory is stale,
    # sees z at 1 again: by its memory nothing changes, so it reads before it skips
    assert b.merge("r", {"z": Decimal(4)}).changed
    again = a.merge("r", {"y": Decimal(3)})
    assert not again.changed and again.reads == 1 and again.writes == 0
    # a's memory is refreshed by that read: its next write succeeds at once
    moved = a.merge("r", {"y": Decimal(6)})
    assert moved.writes == 1 and moved.changed
    state, version = decode(
        ddb.get_item(TableName=name, Key=LAYOUT.item_key(LAYOUT.control_pk, top_sort_key("r")))[
            "Item"
        ]
    )
    assert dict(state.entries) == {"y": 6, "x": 5} and state.floor == 4 and version == first + 2
    # a conflicting write (b's memory is one version old) is retried on the returned item
    conflict = b.merge("r", {"w": Decimal(9)})
    assert conflict.writes == 2 and conflict.reads == 0
    assert exact_top([b.read(["r"])["r"]], 2) == [(9, "w"), (6, "y")]


def test_empty_keys_and_tildes_are_map_names_too(ddb, table) -> None:
    """DynamoDB refuses an empty attribute name; a key part may be empty (``{player}`` of an
    empty string): such keys are listed under an escaped name and read back as they were."""
    name, _ = table
    lists = TopLists(ddb, name, LAYOUT, keep=3)
    assert lists.merge("e", {"": Decimal(4), "~": Decimal(3), "~~a": Decimal(2)}).changed
    item = ddb.get_item(TableName=name, Key=LAYOUT.item_key(LAYOUT.control_pk, top_sort_key("e")))
    assert set(item["Item"]["top"]["M"]) == {"~", "~~", "~~~a"}
    assert dict(lists.read(["e"])["e"].entries) == {"": 4, "~": 3, "~~a": 2}
