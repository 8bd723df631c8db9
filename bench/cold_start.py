"""``python -m bench.cold_start``: what importing the Lambda handler costs against importing boto3
alone, in fresh interpreters on this machine (the import is the part of a cold start the
package controls; Lambda's own init and the first invocation's rule loading come on top).

Each sample is a new ``python -c`` process that imports the module and prints the import's
wall time (``time.perf_counter`` around ``importlib.import_module``, the interpreter's own
start-up excluded), with the environment a deployed function has when tracing is off (the
template's default: ``POWERTOOLS_TRACE_DISABLED=true``). Samples of the two imports alternate,
so a busy machine slows both alike; the figure is the median of each.

    .venv/bin/python -m bench.cold_start              # 15 samples each, about 30 s
    .venv/bin/python -m bench.cold_start --samples 31

Its last line (an interface: outside checks read it)::

    cold-start: import aggregator.handler <ms> ms, <ratio> x boto3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

PROBE = (
    "import importlib, time; t = time.perf_counter(); importlib.import_module({module!r}); "
    "print((time.perf_counter() - t) * 1000)"
)
"""One sample: the wall time of one import in milliseconds."""

ENVIRONMENT = {
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_SERVICE_NAME": "ddb-aggregator",
    "AWS_DEFAULT_REGION": "us-east-1",
}
"""What the deployed function's environment holds that the import may read (tracing off)."""


def sample_ms(module: str) -> float:
    """One fresh interpreter's import time of ``module``, in milliseconds."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **ENVIRONMENT},
    )
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=15, help="fresh interpreters per module")
    args = parser.parse_args(argv)
    handler: list[float] = []
    boto3: list[float] = []
    sample_ms("aggregator.handler")  # warm the file system cache and the byte-code cache once
    for _ in range(args.samples):
        boto3.append(sample_ms("boto3"))
        handler.append(sample_ms("aggregator.handler"))
    handler_ms, boto3_ms = statistics.median(handler), statistics.median(boto3)
    print(
        f"cold-start: boto3 median {boto3_ms:.0f} ms (min {min(boto3):.0f}, max "
        f"{max(boto3):.0f}) over {args.samples} fresh interpreters; aggregator.handler min "
        f"{min(handler):.0f}, max {max(handler):.0f}"
    )
    print(
        f"cold-start: import aggregator.handler {handler_ms:.0f} ms, "
        f"{handler_ms / boto3_ms:.2f} x boto3"
    )


if __name__ == "__main__":
    main()
