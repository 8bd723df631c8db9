"""Fault injection for tests and soak runs: a DynamoDB client wrapper and runner fault plans.

Nothing here is used in Lambda. The local runner and the test suite use it to reproduce what the
event source mapping and DynamoDB do under failure: a function that dies after some of its
updates landed, throttling, batches delivered twice, bisected retries, a runner killed mid-stream.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout

# the runner's fault plan and crash signal live with the runner (what ships never imports dev)
from aggregator.dev.runner import RunnerFaults, SimulatedCrash

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import UpdateItemOutputTypeDef

__all__ = ["FaultInjectingClient", "RunnerFaults", "SimulatedCrash"]


class FaultInjectingClient:
    """Wraps a boto3 DynamoDB client; every other attribute is passed through.

    Parameters
    ----------
    client
        The real client.
    crash_after_updates
        Let this many further ``UpdateItem`` calls succeed, then raise :class:`SimulatedCrash`
        for every call until :meth:`disarm` (the invocation is dead). ``None``: never.
    throttle
        ``{sort key: n}``: the first ``n`` ``UpdateItem`` calls on that aggregate raise
        ``ProvisionedThroughputExceededException``.
    layout
        Where the sort key is in a request's ``Key``.
    """

    def __init__(
        self,
        client: DynamoDBClient,
        *,
        crash_after_updates: int | None = None,
        throttle: dict[str, int] | None = None,
        layout: TableLayout = DEFAULT_LAYOUT,
    ) -> None:
        self._client = client
        self.layout = layout
        self._lock = threading.Lock()
        self.crash_after_updates = crash_after_updates
        self.throttle = dict(throttle or {})
        self.update_calls = 0
        self.crashed = False
        self.crashes = 0

    def arm(self, crash_after_updates: int) -> None:
        """Crash after ``crash_after_updates`` more successful ``UpdateItem`` calls."""
        with self._lock:
            self.crash_after_updates = crash_after_updates
            self.crashed = False

    def disarm(self) -> None:
        with self._lock:
            self.crash_after_updates = None
            self.crashed = False

    def update_item(self, **kwargs: Any) -> UpdateItemOutputTypeDef:
        sort_key = self.layout.sort_key_of(kwargs["Key"]) or ""
        with self._lock:
            self.update_calls += 1
            if self.crashed:
                raise SimulatedCrash("invocation already dead")
            if self.crash_after_updates is not None:
                if self.crash_after_updates <= 0:
                    self.crashed = True
                    self.crashes += 1
                    raise SimulatedCrash(f"crash before updating {sort_key}")
                self.crash_after_updates -= 1
            if self.throttle.get(sort_key, 0) > 0:
                self.throttle[sort_key] -= 1
                raise ClientError(
                    {
                        "Error": {
                            "Code": "ProvisionedThroughputExceededException",
                            "Message": "injected throttling",
                        }
                    },
                    "UpdateItem",
                )
        return self._client.update_item(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)
