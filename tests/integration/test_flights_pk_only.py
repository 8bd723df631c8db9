"""The flights truth test (test_flights.py) on a table with only a partition key, in every write
mode: the framework's items keyed "AGGREGATES#<rule>#<key>", listed through the collection index.
A file of its own so that pytest-xdist (--dist loadfile) runs it beside the PK/SK replays."""

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


@pytest.mark.parametrize(
    ("mode", "faults"), MODES, ids=[m + ("-faults" if f else "") for m, f in MODES]
)
def test_flights_aggregates_equal_csv_ground_truth_on_pk_only(ddb, streams, tmp_path, mode, faults):
    check_flights(ddb, streams, tmp_path, mode, "pk-only", faults)
