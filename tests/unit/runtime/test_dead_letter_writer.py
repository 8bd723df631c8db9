"""Dead letters always fit, and one that DynamoDB still rejects never blocks the shard (stub
clients; the same paths on DynamoDB Local are in tests/integration/test_bad_records.py)."""

from __future__ import annotations

import json
import random
import string
import zlib
from decimal import Decimal

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from aggregator.core.engine import Engine, RecordFailure
from aggregator.core.exceptions import FailureCause, WriteError
from aggregator.core.rules import RuleSet, rule
from aggregator.dynamodb.deadletters import DeadLetterWriter, SqsLastResort
from aggregator.dynamodb.sizes import MAX_ITEM_BYTES, item_size
from aggregator.dynamodb.writer import AtLeastOnceWriter
from aggregator.runtime.processor import StreamProcessor
from tests.factories import stream_record


def client_error(code: str, operation: str = "PutItem") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"injected {code}"}}, operation)


class Table:
    """Records put_item calls; fails them from a list of error codes (None: succeed)."""

    def __init__(self, *errors: str | None) -> None:
        self.errors = list(errors)
        self.items: list[dict] = []

    def put_item(self, *, TableName: str, Item: dict) -> dict:
        error = self.errors.pop(0) if self.errors else None
        if error == "connection":
            raise EndpointConnectionError(endpoint_url="http://x")
        if error:
            raise client_error(error)
        self.items.append(Item)
        return {}


class Queue:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.messages: list[dict] = []

    def send_message(self, *, QueueUrl: str, MessageBody: str) -> dict:
        if self.fail:
            raise client_error("AccessDenied", "SendMessage")
        self.messages.append(json.loads(MessageBody))
        return {}


def failure(record, *, rule_name="r", cause=FailureCause.INVALID_VALUE, seq="5") -> RecordFailure:
    return RecordFailure(seq, "ev", rule_name, "NewImage: reason", record, cause)


def noise(n: int) -> str:
    rng = random.Random(n)
    return "".join(rng.choices(string.ascii_letters, k=n))


def big_record(text: str) -> dict:
    return stream_record(
        "MODIFY", old={"pk": "a", "sk": "b", "t": text}, new={"pk": "a", "sk": "b", "t": text}
    )


def stored_size(item: dict) -> int:
    plain = {}
    for name, value in item.items():
        ((tag, payload),) = value.items()
        plain[name] = Decimal(payload) if tag == "N" else payload
    return item_size(plain)


@pytest.mark.parametrize(
    ("record", "form"),
    [
        (stream_record("INSERT", new={"pk": "a", "sk": "b"}), "json"),
        (big_record("x" * 300_000), "zlib"),
        (big_record(noise(300_000)), "keys"),
        ({"dynamodb": {"Keys": {"pk": {"S": noise(600_000)}}}}, "digest"),
    ],
)
def test_the_record_is_kept_in_the_first_form_that_fits(record, form):
    table = Table()
    stats = DeadLetterWriter(table, "t", clock=lambda: 0).write([failure(record)], shard_id="s-1")
    [item] = table.items
    assert item["record_form"] == {"S": form}
    assert stored_size(item) <= MAX_ITEM_BYTES
    assert (stats.dead_letters, stats.dead_letters_compacted) == (1, form != "json")
    assert item["replayable"] == {"BOOL": form in ("json", "zlib")}
    assert item["record_sha256"]["S"] and int(item["record_bytes"]["N"]) > 0
    if form == "zlib":
        assert json.loads(zlib.decompress(item["record_zlib"]["B"])) == record
    if form == "keys":
        kept = json.loads(item["record_keys"]["S"])
        assert kept["dynamodb"]["Keys"] == record["dynamodb"]["Keys"]


def test_a_rejected_dead_letter_is_written_again_in_its_minimal_form():
    table = Table("ValidationException", None)
    stats = DeadLetterWriter(table, "t").write([failure(big_record("x" * 1000))], shard_id="s")
    [item] = table.items
    assert item["record_form"] == {"S": "digest"} and "record" not in item
    assert (stats.dead_letters, stats.dead_letter_fallbacks, stats.dead_letters_to_queue) == (
        1,
        1,
        0,
    )


def test_a_dead_letter_rejected_twice_goes_to_the_last_resort_queue():
    queue = Queue()
    writer = DeadLetterWriter(
        Table("ValidationException", "ItemCollectionSizeLimitExceededException"),
        "t",
        last_resort=SqsLastResort(queue, "https://sqs/q"),
    )
    stats = writer.write(
        [failure(stream_record("INSERT", new={"pk": "a", "sk": "b"}))], shard_id="s"
    )
    [message] = queue.messages
    assert message["kind"] == "dead-letter" and message["sequence_number"] == "5"
    assert message["keys"]["dynamodb"]["Keys"] == {"pk": {"S": "a"}, "sk": {"S": "b"}}
    assert "ItemCollectionSizeLimitExceededException" in message["dynamodb_error"]
    assert (stats.dead_letters, stats.dead_letters_to_queue) == (1, 1)


@pytest.mark.parametrize(
    ("errors", "queue"),
    [
        (("ValidationException", "ValidationException"), None),  # no last resort configured
        (("ValidationException", "ValidationException"), Queue(fail=True)),  # queue fails too
        (("ProvisionedThroughputExceededException",), Queue()),  # transient: retry the batch
        (("InternalServerError",), Queue()),
        (("connection",), Queue()),
        (("ValidationException", "ThrottlingException"), Queue()),
        # configuration errors: the last resort would only hide them
        (("AccessDeniedException",), Queue()),
        (("ResourceNotFoundException",), Queue()),
        (("ValidationException", "AccessDeniedException"), Queue()),
    ],
)
def test_otherwise_the_batch_fails_and_lambda_retries_it(errors, queue):
    last_resort = None if queue is None else SqsLastResort(queue, "q")
    writer = DeadLetterWriter(Table(*errors), "t", last_resort=last_resort)
    with pytest.raises(WriteError, match="could not dead-letter record 5"):
        writer.write([failure({"eventName": "INSERT"})], shard_id="s")
    if queue is not None:
        assert queue.messages == []


def test_letters_are_keyed_by_shard_sequence_and_rule_or_by_digest():
    table = Table()
    writer = DeadLetterWriter(table, "t")
    writer.write(
        [
            failure({"a": 1}, seq="123"),
            failure("junk", rule_name="*", cause=FailureCause.MALFORMED_RECORD, seq=None),
        ],
        shard_id="shard-1",
    )
    keys = [item["sk"]["S"] for item in table.items]
    assert keys[0] == "shard-1#" + "123".zfill(40) + "#r"
    assert keys[1].startswith("shard-1#unsequenced-") and keys[1].endswith("#*")
    assert table.items[1]["replayable"] == {"BOOL": False}
    assert "sequence_number" not in table.items[1]


class NoWrites:
    def update_item(self, **kwargs):  # pragma: no cover - nothing to apply in these batches
        raise AssertionError("no aggregate write expected")


def test_a_batch_of_only_unsequenced_records_raises_when_its_dead_letter_fails():
    """Nothing could be named in batchItemFailures: the invocation fails (Lambda retries)."""
    engine = Engine(RuleSet.of(rule("total", key="ALL")))
    processor = StreamProcessor(
        engine,
        AtLeastOnceWriter(NoWrites(), "t"),
        DeadLetterWriter(Table("InternalServerError"), "t"),
    )
    with pytest.raises(WriteError):
        processor.process_event({"Records": ["junk"]})


def test_a_failed_dead_letter_fails_the_invocation_even_with_sequenced_records():
    """batchItemFailures could not name the first record (it has no sequence number): Lambda
    retries the whole batch instead, and nothing of it was applied."""
    engine = Engine(RuleSet.of(rule("by_n", key="{n}")))
    processor = StreamProcessor(
        engine,
        AtLeastOnceWriter(NoWrites(), "t"),
        DeadLetterWriter(Table("InternalServerError"), "t"),
    )
    bad = stream_record("INSERT", new={"pk": "a", "sk": "b"}, seq=41)  # no n: a dead letter
    with pytest.raises(WriteError):
        processor.process_event({"Records": ["junk", bad]})


def test_the_handler_wires_the_on_failure_queue_as_the_last_resort(tmp_path):
    from aggregator.handler import HandlerSettings, build_processor

    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - {name: total, key: ALL}\n")
    env = {
        "AGGREGATOR_TABLE_NAME": "t",
        "AGGREGATOR_DEFINITIONS": str(rules),
        "AGGREGATOR_ON_FAILURE_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/q",
        "AGGREGATOR_RULE_MANIFEST": "off",  # the stub table has no manifest to read
    }
    queue = Queue()
    processor = build_processor(
        HandlerSettings.from_env(env), client=Table(), sqs_client=queue, check_table=False
    )
    last_resort = processor.dead_letters.last_resort
    assert isinstance(last_resort, SqsLastResort)
    assert (last_resort.client, last_resort.queue_url) == (
        queue,
        env["AGGREGATOR_ON_FAILURE_QUEUE_URL"],
    )
    without = {k: v for k, v in env.items() if k != "AGGREGATOR_ON_FAILURE_QUEUE_URL"}
    assert (
        build_processor(
            HandlerSettings.from_env(without), client=Table(), check_table=False
        ).dead_letters.last_resort
        is None
    )
