"""Half of the backfill property test (tests/integration/backfill_property.py)."""

from __future__ import annotations

import pytest

from tests.integration.backfill_property import EXAMPLES, check_backfill_property

pytestmark = pytest.mark.integration


def test_backfill_racing_writes_and_faults_is_exact_b(fresh_dynamodb_local):
    check_backfill_property(fresh_dynamodb_local, EXAMPLES // 2, "b")
