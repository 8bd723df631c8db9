"""The names and the size of the exactly-once protocol's checkpoints (pure: no boto3, no I/O).

An aggregate item keeps one checkpoint per stream shard in an attribute ``c#<shard token>``
(:func:`checkpoint_attribute`); an application item that target rules write keeps them in one map
whose entries are named ``<rule token><shard token>`` (:func:`target_token`). The writers
(:mod:`aggregator.dynamodb.checkpoint`, :mod:`aggregator.dynamodb.targets`) write them; the
engine reads a deleted target item's map from its ``REMOVE`` record
(:mod:`aggregator.core.ledger_carries`), so the names are computed here, once, for both.

A checkpoint value is :data:`CHECKPOINT_BYTES` bytes of Binary: the sequence number as
:data:`SEQUENCE_NUMBER_BYTES` big-endian bytes, then the write time as 4 bytes of epoch seconds
(:func:`aggregator.dynamodb.checkpoint.encode_checkpoint`).
"""

from __future__ import annotations

import base64
import functools
import hashlib

__all__ = [
    "CHECKPOINT_BYTES",
    "CHECKPOINT_PREFIX",
    "RULE_TOKEN_CHARS",
    "SEQUENCE_NUMBER_BYTES",
    "SHARD_TOKEN_BYTES",
    "SHARD_TOKEN_CHARS",
    "checkpoint_attribute",
    "rule_token",
    "target_token",
]

CHECKPOINT_PREFIX = "c#"
"""Checkpoint attributes are named ``c#<shard token>`` (:func:`checkpoint_attribute`); readers
ignore them."""
SEQUENCE_NUMBER_BYTES = 17
"""A sequence number (at most 40 decimal digits, DynamoDB Streams API reference, ``StreamRecord``)
as a big-endian unsigned integer: 10**40 < 2**136."""
CHECKPOINT_BYTES = SEQUENCE_NUMBER_BYTES + 4
"""A checkpoint value: the sequence number's bytes and 4 bytes of epoch seconds (21 bytes)."""
SHARD_TOKEN_BYTES = 9
"""Bytes of the shard id's digest in a checkpoint's name."""
SHARD_TOKEN_CHARS = SHARD_TOKEN_BYTES * 4 // 3
"""Characters of a shard token (URL-safe base64 of :data:`SHARD_TOKEN_BYTES` bytes: 12)."""
RULE_TOKEN_CHARS = 6
"""Characters of a rule's digest that start its entries' names in a checkpoint map."""


@functools.lru_cache(maxsize=1024)
def checkpoint_attribute(shard_id: str) -> str:
    """Name of the checkpoint attribute for ``shard_id``: ``c#`` and 12 URL-safe base64
    characters of a 72-bit BLAKE2b digest of the shard id (14 bytes, against 40 for
    ``ck#<shardId>``). Two shards writing one item within the checkpoint retention share a name
    with a probability of about n**2 / 2**73 for n such shards (n = 1,000: 1e-16). Cached: a
    writer names its shard's checkpoint several times per request."""
    digest = hashlib.blake2b(shard_id.encode("utf-8"), digest_size=SHARD_TOKEN_BYTES).digest()
    return CHECKPOINT_PREFIX + base64.urlsafe_b64encode(digest).decode("ascii")


def rule_token(rule: str) -> str:
    """The start of every entry of ``rule`` in a target item's checkpoint map: 6 URL-safe base64
    characters (36 bits) of a digest of the rule's name, so several target rules can share an
    item (each has its own checkpoints) and ``drop-rule`` can find one rule's entries."""
    return checkpoint_attribute(f"rule:{rule}")[len(CHECKPOINT_PREFIX) :][:RULE_TOKEN_CHARS]


def target_token(rule: str, shard_id: str) -> str:
    """The name of a (rule, shard) entry in a target item's checkpoint map: :func:`rule_token`
    and the 12 characters of :func:`checkpoint_attribute` after ``c#`` (18 characters)."""
    return rule_token(rule) + checkpoint_attribute(shard_id)[len(CHECKPOINT_PREFIX) :]
