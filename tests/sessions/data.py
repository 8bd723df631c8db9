"""What the docs' hidden set-up steps write (``python -m tests.sessions.data COMMAND``): an
application's table and items, as an application would have them, on the endpoint in
``AGGREGATOR_ENDPOINT_URL``. Every draw comes from a fixed seed, so a session prints the same
numbers on every run."""

from __future__ import annotations

import os
import random
from typing import Any

import boto3
import click


def _connection() -> dict[str, Any]:
    return {
        "endpoint_url": os.environ["AGGREGATOR_ENDPOINT_URL"],
        "region_name": "us-east-1",
        "aws_access_key_id": "local",
        "aws_secret_access_key": "local",
    }


def _resource() -> Any:
    return boto3.resource("dynamodb", **_connection())


def _post(n: int) -> str:
    return f"POST#{n:04d}"


@click.group()
def main() -> None:
    """Set-up steps of the docs' console sessions."""


@main.command()
@click.option("--table", "name", required=True)
@click.option("--keys", default="PK/SK", show_default=True, help="PARTITION/SORT key names")
def table(name: str, keys: str) -> None:
    """An application's table as it was before the framework: keys only, no stream, no index,
    no TTL."""
    partition, sort = keys.split("/")
    _resource().create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": partition, "KeyType": "HASH"},
            {"AttributeName": sort, "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": partition, "AttributeType": "S"},
            {"AttributeName": sort, "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    ).wait_until_exists()


@main.command()
@click.option("--table", "name", required=True)
@click.option("--posts", type=int, required=True, help="META items POST#0000, POST#0001, ...")
@click.option("--likes", type=int, required=True, help="LIKE#USER#<id> items, Zipf-like skew")
@click.option("--verified", type=float, default=None, help="share of likes with verified: true")
@click.option("--seed", type=int, default=1)
def social(name: str, posts: int, likes: int, verified: float | None, seed: int) -> None:
    """Posts (``PK = POST#<n>``, ``SK = META``) and their likes (``SK = LIKE#USER#<id>``)."""
    draw = random.Random(seed)
    with _resource().Table(name).batch_writer() as batch:
        for n in range(posts):
            batch.put_item(
                Item={"PK": _post(n), "SK": "META", "authorId": f"u{n % 17}", "body": "hello"}
            )
        for like in _likes(draw, posts, likes, verified):
            batch.put_item(Item=like)


def _likes(
    draw: random.Random, posts: int, count: int, verified: float | None, first_user: int = 0
) -> list[dict[str, Any]]:
    weights = [1 / (n + 1) for n in range(posts)]
    chosen = draw.choices(range(posts), weights=weights, k=count)
    likes = []
    for i, post in enumerate(chosen):
        like: dict[str, Any] = {
            "PK": _post(post),
            "SK": f"LIKE#USER#{first_user + i:06d}",
            "likedAt": 1_750_636_800 + i,
        }
        if verified is not None:
            like["verified"] = draw.random() < verified
        likes.append(like)
    return likes


@main.command()
@click.option("--table", "name", required=True)
@click.option("--posts", type=int, required=True, help="the posts liked: POST#0000 to this")
@click.option("--likes", type=int, required=True)
@click.option("--unlikes", type=int, default=0, help="likes deleted again, of those written")
@click.option("--verified", type=float, default=None)
@click.option("--seed", type=int, default=2)
def more_likes(
    name: str, posts: int, likes: int, unlikes: int, verified: float | None, seed: int
) -> None:
    """New likes (users numbered from 500,000: none liked before), then some of them deleted,
    one write at a time as an application makes them."""
    draw = random.Random(seed)
    table = _resource().Table(name)
    written = _likes(draw, posts, likes, verified, first_user=500_000)
    for like in written:
        table.put_item(Item=like)
    for like in draw.sample(written, unlikes):
        table.delete_item(Key={"PK": like["PK"], "SK": like["SK"]})


@main.command()
@click.option("--table", "name", required=True)
@click.option("--hours", type=int, default=24, help="events in the hours before SESSION_CLOCK")
@click.option("--seed", type=int, default=3)
def events(name: str, hours: int, seed: int) -> None:
    """Job events of three providers (``counterKeyPrefix``, ``insertUtcTime`` in epoch
    milliseconds), 5 to 15 an hour each, in the hours before ``SESSION_CLOCK`` (epoch seconds;
    the session's clock)."""
    draw = random.Random(seed)
    end = int(os.environ["SESSION_CLOCK"])
    with _resource().Table(name).batch_writer() as batch:
        for provider in (1, 2, 3):
            for hour in range(hours):
                for _ in range(draw.randint(5, 15)):
                    at = end - (hour + 1) * 3600 + draw.randrange(3600)
                    event_id = f"{provider}-{hour}-{draw.randrange(10**9):09d}"
                    batch.put_item(
                        Item={
                            "pk": f"EVENT#{event_id}",
                            "sk": "EVENT",
                            "counterKeyPrefix": f"job_event_provider_id_{provider}",
                            "insertUtcTime": at * 1000 + draw.randrange(1000),
                        }
                    )


@main.command()
@click.option("--table", "name", required=True)
@click.option("--definitions", "-d", required=True)
@click.argument("rule")
@click.argument("key")
@click.argument("amount", type=int)
def drift(name: str, definitions: str, rule: str, key: str, amount: int) -> None:
    """A stray write: ``ADD amount`` to the stored aggregate of ``rule`` under ``key``, as a
    bug or a hand edit would make it."""
    from aggregator.core.rules import load_rules
    from aggregator.dynamodb.query import AggregateStore

    client = boto3.client("dynamodb", **_connection())
    rules = load_rules(definitions)
    sort_key = AggregateStore(client, name, rules).sort_key(rule, key)
    client.update_item(
        TableName=name,
        Key=rules.layout.aggregate_key(sort_key),
        UpdateExpression="ADD #v :amount",
        ExpressionAttributeNames={"#v": rules.layout.value_attribute},
        ExpressionAttributeValues={":amount": {"N": str(amount)}},
    )


@main.command()
@click.argument("path")
@click.argument("names", nargs=-1, required=True)
@click.option("--match", "also", multiple=True, help="NAME=VALUE (YAML) added to each match")
def rules(path: str, names: tuple[str, ...], also: tuple[str, ...]) -> None:
    """Print the rule file at ``path`` with only the rules ``names`` (as YAML), each rule's
    ``match`` with the tests of ``--match`` added."""
    import yaml

    with open(path) as f:
        document = yaml.safe_load(f)
    document["rules"] = [r for r in document["rules"] if r["name"] in names]
    for test in also:
        name, _, value = test.partition("=")
        for rule in document["rules"]:
            rule["match"][name] = yaml.safe_load(value)
    click.echo(yaml.safe_dump(document, sort_keys=False), nl=False)


if __name__ == "__main__":
    main()
