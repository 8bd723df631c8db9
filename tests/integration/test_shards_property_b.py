"""Half of the multi-shard property test (tests/integration/shards_property.py), on this module's
DynamoDB Local; two files so that pytest-xdist runs the halves on both workers."""

from __future__ import annotations

import pytest

from tests.integration.shards_property import check_part

pytestmark = [pytest.mark.integration, pytest.mark.own_dynamodb_local]


def test_many_shards_with_rollovers_and_faults_stay_exact_b(dynamodb_local):
    check_part("b", dynamodb_local)
