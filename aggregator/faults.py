"""Fault injection for tests and soak runs: a DynamoDB client wrapper and runner fault plans.

Nothing here is used in Lambda. The local runner and the test suite use it to reproduce what the
event source mapping and DynamoDB do under failure: a function that dies after some of its
updates landed, throttling, batches delivered twice, bisected retries, a runner killed mid-stream.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

__all__ = ["FaultInjectingClient", "RunnerFaults", "SimulatedCrash"]


class SimulatedCrash(Exception):
    """The function "died": raised by :class:`FaultInjectingClient` to abort an invocation."""


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
    """

    def __init__(
        self,
        client: Any,
        *,
        crash_after_updates: int | None = None,
        throttle: dict[str, int] | None = None,
    ) -> None:
        self._client = client
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

    def update_item(self, **kwargs: Any) -> Any:
        sort_key = kwargs["Key"]["sk"]["S"]
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


@dataclass
class RunnerFaults:
    """What the local runner does to batches, to reproduce the event source mapping's failures.

    Attributes
    ----------
    duplicate
        ``(batch number) -> bool``: deliver this batch a second time after it succeeded
        (Lambda's at-least-once delivery).
    crash
        ``(batch number) -> int | None``: arm the wrapped client to crash after that many
        updates during this batch.
    bisect_on_error
        On a function error, retry the first half of the batch, then continue from there
        (``BisectBatchOnFunctionError``); otherwise retry the whole batch.
    kill_after_batches
        Stop the runner (raise :class:`SimulatedCrash`) after this many batches in total,
        simulating a killed process; a new runner resumes from the stored positions.
    transform
        Applied to each Lambda-shaped record at every delivery (e.g. to mark TTL deletes or to
        corrupt a record); positions and retries follow the records as read.
    client
        The :class:`FaultInjectingClient` to arm for crashes.
    """

    duplicate: Callable[[int], bool] = lambda n: False
    crash: Callable[[int], int | None] = lambda n: None
    bisect_on_error: bool = False
    kill_after_batches: int | None = None
    transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    client: FaultInjectingClient | None = None
    log: list[str] = field(default_factory=list)

    @staticmethod
    def schedule(batches: Iterable[int]) -> Callable[[int], bool]:
        """A predicate true for the given batch numbers."""
        chosen = frozenset(batches)
        return lambda n: n in chosen
