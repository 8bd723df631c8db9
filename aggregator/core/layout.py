"""Table layout: attribute names and reserved partition keys (pure, documented defaults)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_LAYOUT", "TableLayout"]


@dataclass(frozen=True, slots=True)
class TableLayout:
    """Where the framework keeps its items inside the user's table.

    Attributes
    ----------
    partition_key, sort_key
        Names of the table's key attributes (both type ``S``). Default ``pk`` / ``sk``.
    aggregates_pk
        Partition key value of the aggregates item collection. Default ``AGGREGATES``.
        Aggregate items have sort key ``"<rule>#<encoded key>"``.
    runner_pk, dead_letters_pk
        Partition key values of framework bookkeeping (local runner positions, dead-lettered
        records). Together with ``aggregates_pk`` these are the *reserved* partition keys: stream
        records of items under them never produce deltas (self-write filtering), and the
        template's ``FilterCriteria`` drops them before Lambda is invoked.
    value_attribute
        The counter attribute that ``ADD`` targets (``value`` is a DynamoDB reserved word, so it
        is always sent through ``ExpressionAttributeNames``).
    leaderboard_index, leaderboard_attribute
        Sparse GSI for top-N: partition key ``leaderboard_attribute`` (set to the rule name on
        items of leaderboard rules only), sort key ``value_attribute`` (N).
    ttl_attribute
        TTL attribute name (epoch seconds), used by windowed rules.
    """

    partition_key: str = "pk"
    sort_key: str = "sk"
    aggregates_pk: str = "AGGREGATES"
    runner_pk: str = "AGGREGATOR#RUNNER"
    dead_letters_pk: str = "AGGREGATOR#DEAD_LETTERS"
    value_attribute: str = "value"
    leaderboard_index: str = "leaderboard"
    leaderboard_attribute: str = "lb"
    ttl_attribute: str = "ttl"

    def aggregate_key(self, sort_key: str) -> dict[str, dict[str, str]]:
        """The primary key (DynamoDB JSON) of the aggregate item whose sort key text is
        ``sort_key`` (``"<rule>#<key>"``)."""
        return {
            self.partition_key: {"S": self.aggregates_pk},
            self.sort_key: {"S": sort_key},
        }

    @property
    def reserved_partition_keys(self) -> tuple[str, ...]:
        """Partition key values owned by the framework, in a fixed order."""
        return (self.aggregates_pk, self.runner_pk, self.dead_letters_pk)


DEFAULT_LAYOUT = TableLayout()
