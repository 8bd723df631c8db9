"""Half of the multi-shard property test (tests/integration/shards_property.py), on this module's
DynamoDB Local; two files so that pytest-xdist runs the halves on both workers."""

from __future__ import annotations

import pytest

from tests.integration.shards_property import PARTS, check_part, part_examples

pytestmark = [pytest.mark.integration, pytest.mark.own_dynamodb_local]


@pytest.mark.parametrize("part", range(PARTS))
def test_many_shards_with_rollovers_and_faults_stay_exact_a(dynamodb_local, part):
    check_part(f"a/{part}", dynamodb_local, part_examples(part))
