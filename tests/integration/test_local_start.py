"""Start the real DynamoDB Local (Java) and talk to it with boto3."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from aggregator.core.exceptions import DynamoDBLocalError
from aggregator.dev.local import SHORT_LIVED_JVM_OPTIONS, DynamoDBLocal

pytestmark = pytest.mark.integration

INSTALL_DIR = Path(__file__).resolve().parents[2] / ".cache" / "dynamodb-local"


def port_is_closed(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except OSError:
        return True


def test_start_create_put_get_stop() -> None:
    ddb = DynamoDBLocal(install_dir=INSTALL_DIR, jvm_options=SHORT_LIVED_JVM_OPTIONS)
    with ddb:
        assert ddb.is_running
        port = ddb.port
        assert port is not None
        assert ddb.endpoint_url == f"http://127.0.0.1:{port}"
        client = ddb.client()
        client.create_table(
            TableName="things",
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )
        client.get_waiter("table_exists").wait(
            TableName="things", WaiterConfig={"Delay": 0.2, "MaxAttempts": 50}
        )
        client.put_item(
            TableName="things",
            Item={"pk": {"S": "a"}, "sk": {"S": "1"}, "n": {"N": "42"}},
        )
        item = client.get_item(
            TableName="things", Key={"pk": {"S": "a"}, "sk": {"S": "1"}}, ConsistentRead=True
        )["Item"]
        assert item == {"pk": {"S": "a"}, "sk": {"S": "1"}, "n": {"N": "42"}}
        # the streams endpoint is served by the same process
        streams = ddb.client("dynamodbstreams").list_streams(TableName="things")["Streams"]
        assert len(streams) == 1

    assert not ddb.is_running
    deadline = time.monotonic() + 5
    while not port_is_closed(port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert port_is_closed(port)
    ddb.stop()  # idempotent after the context manager stopped it


def test_restart_loses_in_memory_data() -> None:
    ddb = DynamoDBLocal(install_dir=INSTALL_DIR, jvm_options=SHORT_LIVED_JVM_OPTIONS)
    with ddb:
        ddb.client().create_table(
            TableName="tmp",
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
    with ddb:
        assert ddb.client().list_tables()["TableNames"] == []


def test_early_exit_reports_log_tail(tmp_path: Path) -> None:
    emulator = tmp_path / "amplify-dynamodb-simulator-2.9.30"
    (emulator / "DynamoDBLocal_lib").mkdir(parents=True)
    (emulator / "DynamoDBLocal.jar").write_bytes(b"not a jar")
    ddb = DynamoDBLocal(install_dir=tmp_path, startup_timeout=30)
    with pytest.raises(DynamoDBLocalError) as info:
        ddb.start()
    message = str(info.value)
    assert "exited with code" in message
    assert "jarfile" in message.lower()  # java's own complaint, quoted from the log
    assert not ddb.is_running


def test_relative_install_dir_and_default_port(monkeypatch: pytest.MonkeyPatch) -> None:
    # java runs with cwd=install_dir, so a relative install_dir must be made absolute first
    monkeypatch.chdir(INSTALL_DIR.parent)
    with DynamoDBLocal(
        install_dir=Path(INSTALL_DIR.name), jvm_options=SHORT_LIVED_JVM_OPTIONS
    ) as ddb:
        assert ddb.client().list_tables()["TableNames"] == []


def test_startup_timeout_stops_the_process() -> None:
    # far shorter than any JVM start (a warm one took under 0.3 s here)
    ddb = DynamoDBLocal(
        install_dir=INSTALL_DIR, startup_timeout=0.01, jvm_options=SHORT_LIVED_JVM_OPTIONS
    )
    with pytest.raises(DynamoDBLocalError, match="not ready on port"):
        ddb.start()
    assert not ddb.is_running
