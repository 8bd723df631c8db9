"""The flights truth test (test_flights.py) on a table with only a partition key: the framework's
items keyed "AGGREGATES#<rule>#<key>", listed through the collection index. A file of its own so
that pytest-xdist (--dist loadfile) runs it beside the PK/SK replays. ``make test`` replays the
two exactly-once modes under faults (what the layout changes: checkpoints, recovery reads, the
collection index); the ``at-least-once`` replay, whose writes differ from the PK/SK one's only
in their keys, runs on PK/SK in test_flights.py, and on this layout in ``make soak``."""

from __future__ import annotations

import pytest

from tests.integration.harness import SOAK
from tests.integration.test_flights import MODES, check_flights

pytestmark = [pytest.mark.integration, pytest.mark.own_dynamodb_local]


if SOAK:

    @pytest.fixture
    def dynamodb_local(fresh_dynamodb_local):
        """In a soak, one fresh server per replay (see test_flights.py)."""
        return fresh_dynamodb_local


PK_ONLY_MODES = MODES if SOAK else [(m, f) for m, f in MODES if m != "at-least-once"]


@pytest.mark.parametrize(
    ("mode", "faults"),
    PK_ONLY_MODES,
    ids=[m + ("-faults" if f else "") for m, f in PK_ONLY_MODES],
)
def test_flights_aggregates_equal_csv_ground_truth_on_pk_only(ddb, streams, tmp_path, mode, faults):
    check_flights(ddb, streams, tmp_path, mode, "pk-only", faults)
