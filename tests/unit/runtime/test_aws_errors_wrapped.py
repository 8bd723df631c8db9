"""AWS errors at the handler's cold start and in a batch reach the caller as the project's own
errors (``ConfigError``, ``WriteError``), with the AWS error as their ``__cause__``."""

from __future__ import annotations

from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from aggregator.core.exceptions import ConfigError, WriteError
from aggregator.core.rules import load_rules
from aggregator.handler import HandlerSettings, build_processor
from aggregator.runtime.processor import create_processor

ROOT = Path(__file__).resolve().parents[3]


class Refusing:
    """A DynamoDB client whose every request fails as AWS would refuse it."""

    def __getattr__(self, operation: str):
        def refuse(**_):
            raise ClientError(
                {"Error": {"Code": "AccessDeniedException", "Message": "not allowed"}}, operation
            )

        return refuse


def test_a_table_that_cannot_be_described_is_a_config_error_with_its_cause():
    settings = HandlerSettings("orders", ROOT / "definitions" / "flights.yaml")
    with pytest.raises(ConfigError, match=r"cannot describe table 'orders': .*not allowed") as info:
        build_processor(settings, client=Refusing())
    assert isinstance(info.value.__cause__, ClientError)


def test_a_manifest_that_cannot_be_read_is_a_write_error_with_its_cause():
    rules = load_rules(ROOT / "definitions" / "flights.yaml")
    with pytest.raises(WriteError, match="cannot register the rules") as info:
        create_processor(rules, Refusing(), "orders", lifecycle=True)
    assert isinstance(info.value.__cause__, ClientError)
