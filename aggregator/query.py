"""Read API over the ``AGGREGATES`` partition: one aggregate, all of a rule, top-N.

Every call reports the requests it made (``AggregateStore.requests``) so costs can be shown.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from .config import DEFAULT_LAYOUT, TableLayout
from .exceptions import QueryError, RuleError
from .rules import Rule, RuleSet, unescape_key_part

__all__ = ["Aggregate", "AggregateStore"]


@dataclass(frozen=True, slots=True)
class Aggregate:
    """One aggregate item as read back.

    Attributes
    ----------
    rule
        Rule name.
    key
        Display key (raw attribute values, e.g. ``"JFK#BOS"``).
    value
        The counter, ``Decimal``.
    sort_key
        The item's sort key (``"<rule>#<encoded key>"``).
    """

    rule: str
    key: str
    value: Decimal
    sort_key: str


def _s(value: Mapping[str, Any] | None) -> str | None:
    return None if value is None else value.get("S")


class AggregateStore:
    """Query aggregates of a rule set.

    Parameters
    ----------
    client
        A boto3 DynamoDB client.
    table_name
        The table holding the ``AGGREGATES`` partition.
    rules
        The rule set (to resolve keys and know which rules have a leaderboard index).
    layout
        Table layout.

    Examples
    --------
    ``store.get("flights_by_carrier", "UA")``, ``store.top("flights_by_carrier", 5)``,
    ``{a.key: a.value for a in store.list("flights_by_carrier")}``.
    """

    def __init__(
        self, client: Any, table_name: str, rules: RuleSet, *, layout: TableLayout = DEFAULT_LAYOUT
    ) -> None:
        self.client = client
        self.table_name = table_name
        self.rules = rules
        self.layout = layout
        self.requests = 0

    def _rule(self, name: str) -> Rule:
        try:
            return self.rules.get(name)
        except RuleError as exc:
            raise QueryError(str(exc)) from None

    def sort_key(self, rule: str, key: str | Sequence[Any] | Mapping[str, Any] = ()) -> str:
        """The sort key of one aggregate.

        ``key`` is the placeholder value for a one-placeholder template (``"UA"``), a sequence
        of values in placeholder order, a mapping of placeholder names to values, or empty for
        a literal key.

        Raises
        ------
        QueryError
            When the values do not fit the rule's key template.
        """
        template = self._rule(rule).key
        if isinstance(key, str):
            values: list[Any] = [key]
        elif isinstance(key, Mapping):
            missing = [p for p in template.placeholders if p not in key]
            if missing:
                raise QueryError(f"rule {rule!r}: key needs values for {missing}")
            values = [key[p] for p in template.placeholders]
        else:
            values = list(key)
        if template.is_literal and values in ([], [template.template]):
            values = []
        if len(values) != len(template.placeholders):
            raise QueryError(
                f"rule {rule!r}: key template {template.template!r} takes "
                f"{len(template.placeholders)} value(s) {list(template.placeholders)}, got {values}"
            )
        encoded, _ = template.render_values(
            [v if isinstance(v, str | bool | Decimal) else Decimal(str(v)) for v in values]
        )
        return f"{rule}#{encoded}"

    def _aggregate(self, item: Mapping[str, Any], rule: str) -> Aggregate:
        sk = _s(item.get(self.layout.sort_key)) or ""
        key = _s(item.get("key"))
        if key is None:
            key = unescape_key_part(sk[len(rule) + 1 :])
        value = item.get(self.layout.value_attribute, {}).get("N", "0")
        return Aggregate(rule, key, Decimal(value), sk)

    def _call(self, operation: str, **kwargs: Any) -> dict[str, Any]:
        self.requests += 1
        try:
            return getattr(self.client, operation)(TableName=self.table_name, **kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise QueryError(f"{operation} on {self.table_name!r} failed: {exc}") from exc

    def get(self, rule: str, key: str | Sequence[Any] | Mapping[str, Any] = ()) -> Aggregate | None:
        """One aggregate (strongly consistent read), or ``None`` if it was never written.

        Raises
        ------
        QueryError
            For an unknown rule, a key that does not fit, or a failed request.
        """
        sk = self.sort_key(rule, key)
        response = self._call(
            "get_item",
            Key={
                self.layout.partition_key: {"S": self.layout.aggregates_pk},
                self.layout.sort_key: {"S": sk},
            },
            ConsistentRead=True,
        )
        item = response.get("Item")
        return None if item is None else self._aggregate(item, rule)

    def list(self, rule: str) -> Iterator[Aggregate]:
        """Every aggregate of ``rule`` in sort-key order (paginated ``Query``, 1 MB pages).

        Raises
        ------
        QueryError
            For an unknown rule or a failed request.
        """
        self._rule(rule)
        start: dict[str, Any] | None = None
        while True:
            kwargs: dict[str, Any] = {
                "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
                "ExpressionAttributeNames": {
                    "#pk": self.layout.partition_key,
                    "#sk": self.layout.sort_key,
                },
                "ExpressionAttributeValues": {
                    ":pk": {"S": self.layout.aggregates_pk},
                    ":prefix": {"S": f"{rule}#"},
                },
                "ConsistentRead": True,
            }
            if start:
                kwargs["ExclusiveStartKey"] = start
            response = self._call("query", **kwargs)
            for item in response.get("Items", []):
                yield self._aggregate(item, rule)
            start = response.get("LastEvaluatedKey")
            if not start:
                return

    def top(self, rule: str, n: int = 10) -> list[Aggregate]:
        """The ``n`` largest aggregates of ``rule``, largest first (ties by key).

        Leaderboard rules read one page of the sparse ``leaderboard`` GSI in descending order
        (eventually consistent, as every GSI read); other rules read all their aggregates and
        sort them.

        Raises
        ------
        QueryError
            For an unknown rule, ``n < 1`` or a failed request.
        """
        if n < 1:
            raise QueryError(f"n must be at least 1, got {n}")
        if not self._rule(rule).leaderboard:
            ranked = sorted(self.list(rule), key=lambda a: (-a.value, a.key))
            return ranked[:n]
        lay = self.layout
        response = self._call(
            "query",
            IndexName=lay.leaderboard_index,
            KeyConditionExpression="#lb = :rule",
            ExpressionAttributeNames={"#lb": lay.leaderboard_attribute},
            ExpressionAttributeValues={":rule": {"S": rule}},
            ScanIndexForward=False,
            Limit=n,
        )
        out = []
        for item in response.get("Items", []):
            sk = _s(item.get(lay.sort_key)) or ""
            value = Decimal(item[lay.value_attribute]["N"])
            out.append(Aggregate(rule, unescape_key_part(sk[len(rule) + 1 :]), value, sk))
        return out
