"""``aggregator run`` stops on SIGTERM even while a batch is being processed: the batch's own
``except Exception`` (a function error, which the runner retries) must not swallow it."""

from __future__ import annotations

import contextlib
import os
import signal

from aggregator.cli.commands.run import _run_until_stopped


class Runner:
    """Raises SIGTERM in the middle of a batch, inside the runner's function-error handler's
    reach, then would run on forever."""

    def __init__(self) -> None:
        self.batches_after_signal = 0

    def run(self, *, until_caught_up: bool, stats: object) -> None:
        # what StreamRunner._invoke does with a function error: catch Exception, retry
        with contextlib.suppress(Exception):
            os.kill(os.getpid(), signal.SIGTERM)  # the handler raises here
        self.batches_after_signal += 1  # reached only when the stop was swallowed


def test_sigterm_during_a_batch_stops_the_run():
    runner = Runner()
    before = signal.getsignal(signal.SIGTERM)
    assert _run_until_stopped(runner, object(), until_caught_up=False) == "SIGTERM"  # type: ignore[arg-type]
    assert runner.batches_after_signal == 0
    assert signal.getsignal(signal.SIGTERM) is before  # the previous handler is back
