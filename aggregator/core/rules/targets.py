"""Aggregate targets: a rule that keeps its sum in an attribute of an application item.

The reference-count pattern (``likeTally`` on each post's ``META`` item, read with one
``GetItem``) as a rule::

    rules:
      - name: like_tally
        match: {SK: {prefix: "LIKE#"}}
        target:
          partition_key: "{PK}"      # key templates over the source image, raw values
          sort_key: META             # omitted on a table without a sort key
          attribute: likeTally       # the number the rule ADDs to

A target rule has no ``key``: its aggregate is the target item, and the engine keys its deltas by
the two templates joined with ``#`` (the same key text names the rule's ledger item of deltas that
found no target, :mod:`aggregator.dynamodb.targets`). Its kind is ``sum``; it has no window and no
leaderboard (rank the target items with a rule that reads the target attribute).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from aggregator.core.exceptions import EvaluationError, FailureCause
from aggregator.core.rules.keys import KeyTemplate
from aggregator.core.text import quote

__all__ = ["MAX_PARTITION_KEY_BYTES", "Target", "target_key_template"]

MAX_PARTITION_KEY_BYTES = 2048
"""Longest partition key value, in UTF-8 bytes (DynamoDB Developer Guide, "Service, account, and
table quotas": partition key values 1 to 2,048 bytes; sort key values 1 to 1,024)."""
MAX_TARGET_SORT_KEY_BYTES = 1024


def _template(value: Any) -> KeyTemplate:
    if isinstance(value, KeyTemplate):
        return value
    return KeyTemplate.parse(value)


TemplateField = Annotated[KeyTemplate, BeforeValidator(_template)]


def target_key_template(target: Mapping[str, Any] | Target) -> str | None:
    """The ``key`` text of a target rule: the partition key template, then ``#`` and the sort key
    template when there is one; ``None`` when the templates are not text (the target's own
    validation reports that)."""
    if isinstance(target, Target):
        parts: list[Any] = [target.partition_key.template]
        if target.sort_key is not None:
            parts.append(target.sort_key.template)
    else:
        parts = [target.get("partition_key")]
        if target.get("sort_key") is not None:
            parts.append(target.get("sort_key"))
    if not all(isinstance(p, str) for p in parts):
        return None
    return "#".join(parts)


class Target(BaseModel):
    """The application item a rule keeps its aggregate on, and the attribute.

    Attributes
    ----------
    partition_key, sort_key
        Key templates over the source image (``"{PK}"``, ``"POST#{postId}"``, a literal), rendered
        with raw values: the target item's key (type ``S``). ``sort_key`` is required on a table
        with a sort key and refused on one without (checked with the rule set's ``table:``).
    attribute
        The number attribute the rule ``ADD``\\ s its deltas to; the framework writes nothing
        else on the item but its checkpoint map (``table: target_checkpoints_attribute``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    partition_key: TemplateField
    sort_key: TemplateField | None = None
    attribute: str = Field(min_length=1, max_length=255)

    @model_validator(mode="after")
    def _names(self) -> Target:
        if len(self.attribute.encode("utf-8")) > 255:
            raise ValueError("attribute is over 255 bytes, DynamoDB's limit for attribute names")
        if self.attribute in self.attributes():
            raise ValueError(
                f"attribute {quote(self.attribute)} is also in the target's key templates"
            )
        return self

    def attributes(self) -> frozenset[str]:
        """Image attributes the key templates read."""
        out = self.partition_key.attributes()
        return out | (self.sort_key.attributes() if self.sort_key is not None else frozenset())

    def render(self, image: Mapping[str, Any]) -> tuple[str, ...]:
        """The target item's key values, ``(partition key,)`` or ``(partition key, sort key)``.

        Raises
        ------
        EvaluationError
            When a template's attribute is missing or of a type a key cannot hold, or a value
            would be empty or longer than DynamoDB allows (2,048 bytes for a partition key,
            1,024 for a sort key: :data:`MAX_PARTITION_KEY_BYTES`).
        """
        out = []
        for label, template, limit in (
            ("partition_key", self.partition_key, MAX_PARTITION_KEY_BYTES),
            ("sort_key", self.sort_key, MAX_TARGET_SORT_KEY_BYTES),
        ):
            if template is None:
                continue
            try:
                text = template.render(image)[1]
            except EvaluationError as exc:
                raise EvaluationError(f"target {label}: {exc}", exc.cause) from None
            size = len(text.encode("utf-8"))
            if size == 0:
                raise EvaluationError(
                    f"target {label} would be empty; DynamoDB key values are 1 byte or more",
                    FailureCause.INVALID_VALUE,
                )
            if size > limit:
                raise EvaluationError(
                    f"target {label} would be {size} bytes, over DynamoDB's {limit}-byte limit",
                    FailureCause.LIMIT_EXCEEDED,
                )
            out.append(text)
        return tuple(out)

    def placeholder_values(self, values: Sequence[str]) -> dict[str, str] | None:
        """The placeholders' values that :meth:`render` turns into the item key ``values``
        (``(partition key,)`` or ``(partition key, sort key)``, raw text): each template's
        values read back with :meth:`~aggregator.core.rules.keys.KeyTemplate.split_display`;
        ``None`` when no image could target that item (a value that does not fit its template,
        or fits it in more than one way, or a placeholder of both templates read two ways)."""
        templates = [self.partition_key]
        if self.sort_key is not None:
            templates.append(self.sort_key)
        if len(values) != len(templates):
            return None
        found: dict[str, str] = {}
        for text, template in zip(values, templates, strict=True):
            try:
                parts = template.split_display(text)
            except ValueError:
                return None
            for name, value in zip(template.placeholders, parts, strict=True):
                if found.setdefault(name, value) != value:
                    return None
        return found
