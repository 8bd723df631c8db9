"""The public API is what users call: ``aggregator.__all__`` is pinned here (a change to it is a
decision, made in this list and in docs/api.md), and each name the package used to export that
is internal still resolves, with a ``DeprecationWarning`` naming its module."""

from __future__ import annotations

import importlib
import re
import warnings
from pathlib import Path

import pytest

import aggregator

ROOT = Path(__file__).resolve().parents[2]

PUBLIC = {
    # rules
    "load_rules",
    "rule",
    "RuleSet",
    "Rule",
    "Window",
    "Bucket",
    "Granularity",
    "parse_duration",
    "TableLayout",
    "DEFAULT_LAYOUT",
    # reading
    "AggregateStore",
    "Aggregate",
    "HistogramBucket",
    "WindowResult",
    # processing
    "Engine",
    "StreamRecord",
    "StreamProcessor",
    "BatchOutcome",
    # writing: the factory and the protocol, no concrete writer
    "make_writer",
    "Writer",
    "WriterOptions",
    "WriteResult",
    # deployment
    "filter_criteria",
    "check_template",
    # errors
    "AggregatorError",
    "RuleError",
    "ConfigError",
    "EvaluationError",
    "EventError",
    "WriteError",
    "QueryError",
    "RunnerError",
    "DynamoDBLocalError",
    "AwsError",
    "AwsRequestError",
    "AwsConnectionError",
    "UnprocessedKeysError",
}

DEPRECATED = {
    # the module each lives in (not a module that re-exports it)
    "AggregateRef": "aggregator.core.deltas",
    "BatchDeltas": "aggregator.core.deltas",
    "CoalescedDelta": "aggregator.core.deltas",
    "RecordFailure": "aggregator.core.deltas",
    "AtLeastOnceWriter": "aggregator.dynamodb.writer",
    "WriteStats": "aggregator.dynamodb.write_stats",
}


def test_all_is_the_public_api() -> None:
    assert set(aggregator.__all__) == PUBLIC
    assert len(aggregator.__all__) == len(PUBLIC)  # no name twice
    assert not PUBLIC & set(DEPRECATED)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_each_public_name_resolves_without_a_warning(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = getattr(aggregator, name)
    assert value is not None
    assert name in dir(aggregator)


def test_the_default_writer_is_reached_through_make_writer() -> None:
    # the supported way to any writer: make_writer, typed by the Writer protocol
    assert aggregator.make_writer.__annotations__["return"] in ("Writer", aggregator.Writer)
    assert not [n for n in aggregator.__all__ if n.endswith("Writer") and n != "Writer"]


@pytest.mark.parametrize(("name", "module"), sorted(DEPRECATED.items()))
def test_each_deprecated_name_warns_and_resolves(name: str, module: str) -> None:
    expected = getattr(importlib.import_module(module), name)
    with pytest.warns(DeprecationWarning) as caught:
        value = getattr(aggregator, name)
    assert value is expected
    (warning,) = caught
    assert f"from {module} import {name}" in str(warning.message)
    assert warning.filename == __file__  # points at the caller, not at the package
    assert name not in aggregator.__all__ and name not in dir(aggregator)


def test_a_deprecated_name_warns_on_every_use() -> None:
    # not cached in the module: a second import warns again
    for _ in range(2):
        with pytest.warns(DeprecationWarning, match=r"aggregator\.BatchDeltas is internal"):
            from aggregator import BatchDeltas  # noqa: F401


def test_the_api_page_documents_exactly_the_public_names() -> None:
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^::: aggregator\.(\w+)$", page, re.M))
    assert documented == PUBLIC
    for name in DEPRECATED:
        assert f"`{name}`" in page  # named in the deprecation paragraph


def test_dir_lists_the_public_names_and_no_import_helpers():
    listed = set(dir(aggregator))
    assert set(aggregator.__all__) <= listed
    assert not {"Any", "TYPE_CHECKING", "annotations", "importlib", "warnings"} & listed
