"""Shared fixtures. Integration fixtures start AWS's DynamoDB Local (installed by the project)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PK_ONLY_DEFINITIONS = [
    # reference_counts.yaml keeps its tally on the post's META item, addressed by a sort key
    *sorted(p for p in (ROOT / "definitions").glob("*.yaml") if p.name != "reference_counts.yaml"),
    ROOT / "definitions" / "layouts" / "pk_only.yaml",
]
"""The demo rule files on a table with only a partition key (``layouts/pk_only.yaml``)."""
_table_names = itertools.count()

# The installed-wheel tests run from `make test-package`, which builds the wheel and names it.
collect_ignore = [] if os.environ.get("AGGREGATOR_WHEEL") else ["package"]


def _local_server() -> Iterator[object]:
    """Start DynamoDB Local, installed into ``<repo>/.cache/dynamodb-local`` (git-ignored) on
    first use. When it cannot start, the tests that need it fail under ``CI=true`` and are skipped
    elsewhere with the reason."""
    from aggregator.core.exceptions import DynamoDBLocalError
    from aggregator.dev.local import SHORT_LIVED_JVM_OPTIONS, DynamoDBLocal

    install_dir = Path(
        os.environ.get("AGGREGATOR_DYNAMODB_LOCAL_DIR") or ROOT / ".cache" / "dynamodb-local"
    )
    server = DynamoDBLocal(install_dir=install_dir, jvm_options=SHORT_LIVED_JVM_OPTIONS)
    try:
        server.start()
    except DynamoDBLocalError as exc:
        # a skipped integration tier would hide failures: fail, unless explicitly asked to skip
        if os.environ.get("AGGREGATOR_SKIP_INTEGRATION", "").lower() in ("1", "true", "yes"):
            pytest.skip(f"DynamoDB Local could not start (AGGREGATOR_SKIP_INTEGRATION): {exc}")
        pytest.fail(f"DynamoDB Local could not start: {exc}")
    yield server
    server.stop()


@pytest.fixture(scope="session", autouse=True)
def _local_stream_polls() -> Iterator[None]:
    """Runners made in this process poll caught-up shards every 10 ms, not Lambda's 250: DynamoDB
    Local's stream shows a record once its write returns, and each run to the end of a stream
    waits two empty polls (with Lambda's interval that was a third of some tests' time)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("aggregator.dev.runner.POLL_INTERVAL_SECONDS", 0.01)
        yield


@pytest.fixture(scope="session")
def shared_dynamodb_local() -> Iterator[object]:
    """The DynamoDB Local server of the test process's light modules (see ``dynamodb_local``)."""
    yield from _local_server()


@pytest.fixture(scope="module")
def dynamodb_local(request: pytest.FixtureRequest) -> Iterator[object]:
    """A DynamoDB Local server: the module's own when it is marked ``own_dynamodb_local``, else
    one shared by the light modules of the test process.

    DynamoDB Local keeps the streams of deleted tables in memory and slows down as they pile up
    (five 3-day flights replays on one server took 7, 25, 43, 67 and 84 s; the whole suite on one
    server per test process spent twice the server CPU of one per module), while a start and its
    JIT warm-up cost about 2.3 s of CPU. So a module that writes thousands of items gets its own,
    and the modules that write a few hundred share one.
    """
    if request.node.get_closest_marker("own_dynamodb_local"):
        yield from _local_server()
    else:
        yield request.getfixturevalue("shared_dynamodb_local")


@pytest.fixture
def fresh_dynamodb_local() -> Iterator[object]:
    """A DynamoDB Local server for one test (for the heavy real-data replays)."""
    yield from _local_server()


@pytest.fixture
def ddb(dynamodb_local):
    """A boto3 DynamoDB client for DynamoDB Local."""
    return dynamodb_local.client("dynamodb")


@pytest.fixture
def streams(dynamodb_local):
    """A boto3 DynamoDB Streams client for DynamoDB Local."""
    return dynamodb_local.client("dynamodbstreams")


@pytest.fixture
def table(ddb):
    """A fresh table (keys, stream, GSI, TTL) per test; yields ``(name, stream_arn)``."""
    from aggregator.dynamodb.table import create_table

    name = f"test-{os.getpid()}-{next(_table_names)}"
    arn = create_table(ddb, name)
    yield name, arn
    ddb.delete_table(TableName=name)
