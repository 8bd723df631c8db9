"""Half of the backfill property test (tests/integration/backfill_property.py), in parts of a few
scenarios on this module's DynamoDB Local: pytest-xdist (``--dist loadfile``) hands out files
with many tests first, so the two halves start early on the two workers instead of trailing."""

from __future__ import annotations

import pytest

from tests.integration.backfill_property import PARTS, SOAK, check_backfill_property, part_examples

pytestmark = [pytest.mark.integration, pytest.mark.own_dynamodb_local]


@pytest.mark.parametrize("part", range(PARTS))
def test_backfill_racing_writes_and_faults_is_exact_a(request, part):
    # this module's server for CI's few scenarios; one per part for a soak's many (DynamoDB
    # Local slows down as the streams of deleted tables pile up)
    server = request.getfixturevalue("fresh_dynamodb_local" if SOAK else "dynamodb_local")
    check_backfill_property(server, part_examples("a", part), f"a/{part}")
