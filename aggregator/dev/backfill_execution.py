"""A local stand-in for the backfill's state machine (:class:`LocalExecution`): the same tasks
(:func:`~aggregator.operations.backfill.distributed.run_task`) in the same order and loops as the
Step Functions definition runs them (``aggregator.deploy.backfill_machine``), on threads of
this process, with an invocation time budget, so that tests and the twin can run a distributed
backfill without AWS.

What it does not model: Step Functions' own retries and payload limits, Lambda's cold starts
and concurrency quota; each "invocation" is a call of ``invoke`` (in this process by default; the
twin passes one that runs a separate process and may kill it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from aggregator.core.clock import Clock
from aggregator.core.exceptions import ConfigError
from aggregator.core.rules import RuleSet
from aggregator.dev.faults import SimulatedCrash
from aggregator.dynamodb.streams import TableStream
from aggregator.operations.backfill.distributed import run_task

__all__ = ["Invoke", "LocalExecution"]

Invoke = Callable[[dict[str, Any]], dict[str, Any]]
"""Runs one task invocation (its request) and returns the task's response; raises if the
invocation failed (a killed one included): the execution invokes it again."""


@dataclass
class LocalExecution:
    """Runs a distributed backfill to its end as the state machine would.

    Attributes
    ----------
    invoke
        One invocation of a task (:data:`Invoke`).
    died_retries
        Invocations of one task in a row that may die (raise one of ``died``) before the
        execution fails: the definition retries ``Lambda.Unknown`` 3 times.
    retries
        Other failed invocations of one task in a row before the execution fails (the
        definition retries any other error 3 times); a task's refusal (``ConfigError``) fails
        it at once, as there.
    died
        What a died invocation raises (default :class:`~aggregator.dev.faults.SimulatedCrash`).
    calls
        Every request made, in order (tests check the protocol's order with it).
    """

    invoke: Invoke
    died_retries: int = 3
    retries: int = 3
    died: tuple[type[BaseException], ...] = (SimulatedCrash,)
    calls: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def in_process(
        cls,
        rules: RuleSet,
        table: TableStream,
        *,
        budget_seconds: float = 60.0,
        clock: Clock | None = None,
        before: Callable[[dict[str, Any]], None] | None = None,
        died_retries: int = 3,
    ) -> LocalExecution:
        """Invocations in this process, each with ``budget_seconds``; ``before`` is called with
        each request first (a test interleaves writes or raises to kill it)."""

        def invoke(request: dict[str, Any]) -> dict[str, Any]:
            if before is not None:
                before(request)
            extra = {} if clock is None else {"clock": clock}
            return run_task(
                request, rules=rules, table=table, remaining_seconds=budget_seconds, **extra
            )

        return cls(invoke, died_retries=died_retries)

    def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        deaths = failures = 0
        while True:
            with self.lock:
                self.calls.append(dict(request))
            try:
                return self.invoke(request)
            except ConfigError:
                raise  # a task's refusal: never retried
            except self.died:
                deaths += 1
                if deaths > self.died_retries:
                    raise
            except Exception:
                failures += 1
                if failures > self.retries:
                    raise

    def _until_done(self, request: dict[str, Any], flag: str = "done") -> dict[str, Any]:
        while True:
            response = self._call(request)
            if response.get(flag):
                return response

    def run(self, execution_input: Mapping[str, Any]) -> dict[str, Any]:
        """The execution: start, collect until fenced, then the collector beside the map of
        scans (``workers`` at once) and the scan's end, then the joins, the reduces, finish.
        Returns ``finish``'s response."""
        started = self._call({"task": "start", "backfill_id": None, **execution_input})
        backfill_id = started["backfill_id"]
        base = {"backfill_id": backfill_id}
        workers = max(1, int(started["workers"]))
        self._until_done({"task": "collect", **base, "until_fenced": True}, flag="fenced")
        with ThreadPoolExecutor(max_workers=1) as collector_pool:
            collector = collector_pool.submit(self._until_done, {"task": "collect", **base})
            self._map("scan", "segment", started["segments"], base, workers)
            self._call({"task": "scan_end", **base})
            collector.result()
        self._map("join", "bucket", started["join_buckets"], base, workers)
        self._map("reduce", "bucket", started["reduce_buckets"], base, workers)
        return self._call({"task": "finish", **base})

    def _map(
        self, task: str, name: str, values: list[int], base: dict[str, Any], workers: int
    ) -> None:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [
                pool.submit(self._until_done, {"task": task, **base, name: value})
                for value in values
            ]
            for future in futures:
                future.result()
