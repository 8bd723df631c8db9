"""``python -m bench.cold_start``: what importing the Lambda handler costs against importing boto3
alone, in fresh interpreters on this machine (the import is the part of a cold start the
package controls; Lambda's own init and the first invocation's rule loading come on top).

The handler is imported from an artifact that ``aggregator build`` writes
(:func:`aggregator.cli.project.build.build_function`, its code and rules only, for this
Python's version): the package without what the handler never imports (CLI, dev tools, CDK
construct, operator jobs, deploy tools), with the bytecode the build compiles. Its dependencies
(pydantic, Powertools, PyYAML) and boto3 come from this environment, with the bytecode pip
compiled when it installed them. Each sample is a new
``python -c`` process that imports the module and prints the import's wall time
(``time.perf_counter`` around ``importlib.import_module``, the interpreter's own start-up
excluded), with the environment a deployed function has when tracing is off (the template's
default: ``POWERTOOLS_TRACE_DISABLED=true``) and, as in Lambda, no bytecode written
(``PYTHONDONTWRITEBYTECODE``: the function's code directory is read-only). Samples alternate
between the imports, so a busy machine slows them alike; the figures are medians.

A second artifact built ``--no-bytecode`` shows what each cold start paid before the build
shipped bytecode: Python compiles every module of the package it imports, and cannot keep the
result.

    .venv/bin/python -m bench.cold_start              # 15 samples each, about 40 s
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
import tempfile
from pathlib import Path

from aggregator.cli.project.build import FunctionRuntime, build_function

PROBE = (
    "import importlib, time; t = time.perf_counter(); importlib.import_module({module!r}); "
    "print((time.perf_counter() - t) * 1000)"
)
"""One sample: the wall time of one import in milliseconds."""

ENVIRONMENT = {
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_SERVICE_NAME": "ddb-aggregator",
    "AWS_DEFAULT_REGION": "us-east-1",
    "PYTHONDONTWRITEBYTECODE": "1",
}
"""What the deployed function's environment holds that the import may read (tracing off), and
no bytecode written (Lambda cannot write it)."""

DEFINITIONS = Path(__file__).resolve().parent.parent / "definitions"


def sample_ms(module: str, artifact: Path | None = None) -> float:
    """One fresh interpreter's import time of ``module`` in milliseconds, with ``artifact``
    first on the module search path."""
    env = {**os.environ, **ENVIRONMENT}
    if artifact is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(artifact), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=artifact,
    )
    return float(out.stdout.strip().splitlines()[-1])


def build(output: Path, *, bytecode: bool) -> Path:
    """The handler's artifact for this Python's version (code and rules, no pip install)."""
    this = FunctionRuntime.of(f"python{sys.version_info.major}.{sys.version_info.minor}")
    built = build_function(
        [DEFINITIONS], output, template=None, runtime=this, dependencies=False, bytecode=bytecode
    )
    if bytecode and built.bytecode_by is None:
        raise SystemExit("cold-start: the build shipped no bytecode")
    return output


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=15, help="fresh interpreters per module")
    args = parser.parse_args(argv)
    samples: dict[str, list[float]] = {"boto3": [], "artifact": [], "sources": []}
    with tempfile.TemporaryDirectory() as scratch:
        artifact = build(Path(scratch) / "artifact", bytecode=True)
        sources = build(Path(scratch) / "sources", bytecode=False)
        for where in (artifact, sources):  # warm the file system cache once
            sample_ms("aggregator.handler", where)
        for _ in range(args.samples):
            samples["boto3"].append(sample_ms("boto3"))
            samples["artifact"].append(sample_ms("aggregator.handler", artifact))
            samples["sources"].append(sample_ms("aggregator.handler", sources))
    boto3_ms, handler_ms, sources_ms = (statistics.median(samples[k]) for k in samples)
    handler = samples["artifact"]
    print(
        f"cold-start: boto3 median {boto3_ms:.0f} ms (min {min(samples['boto3']):.0f}, max "
        f"{max(samples['boto3']):.0f}) over {args.samples} fresh interpreters; "
        f"aggregator.handler min {min(handler):.0f}, max {max(handler):.0f}"
    )
    print(
        f"cold-start: without the artifact's bytecode (each module compiled at import) "
        f"{sources_ms:.0f} ms, {sources_ms / boto3_ms:.2f} x boto3"
    )
    print(
        f"cold-start: import aggregator.handler {handler_ms:.0f} ms, "
        f"{handler_ms / boto3_ms:.2f} x boto3"
    )


if __name__ == "__main__":
    main()
