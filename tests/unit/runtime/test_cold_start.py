"""What the Lambda handler's import loads: nothing its path does not use (issue 20's cold start;
``python -m bench.cold_start`` measures the time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from aggregator.handler import tracing_wanted


def _loaded_after(statement: str, **environ: str) -> set[str]:
    """The modules a fresh interpreter has loaded after ``statement``."""
    code = f"import json, sys; {statement}; print(json.dumps(sorted(sys.modules)))"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_LAMBDA", "POWERTOOLS"))}
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        env={**env, **environ},
    )
    return set(json.loads(out.stdout))


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({"POWERTOOLS_TRACE_DISABLED": "true", "AWS_LAMBDA_FUNCTION_NAME": "f"}, False),
        ({"POWERTOOLS_TRACE_DISABLED": "1", "AWS_LAMBDA_FUNCTION_NAME": "f"}, False),
        ({"POWERTOOLS_TRACE_DISABLED": "false", "AWS_LAMBDA_FUNCTION_NAME": "f"}, True),
        ({"AWS_LAMBDA_FUNCTION_NAME": "f"}, True),  # Powertools' default in Lambda: on
        ({"POWERTOOLS_TRACE_DISABLED": "false"}, False),  # not in Lambda: the Tracer is off
    ],
)
def test_the_tracer_is_built_only_where_it_may_trace(environ, wanted):
    assert tracing_wanted(environ) is wanted


def test_the_handler_loads_neither_xray_nor_the_query_and_operator_modules_when_tracing_is_off():
    loaded = _loaded_after("import aggregator.handler", POWERTOOLS_TRACE_DISABLED="true")
    assert "aggregator.handler" in loaded and "aggregator.runtime.processor" in loaded
    unused = {
        "aws_xray_sdk",
        "aggregator.dynamodb.query",
        "aggregator.operations",
        "aggregator.deploy",
        "aggregator.cli",
        "aggregator.dev",
    }
    assert not {m for m in loaded for u in unused if m == u or m.startswith(f"{u}.")}


def test_the_package_exports_its_public_names_on_first_use():
    loaded = _loaded_after("import aggregator")
    assert "aggregator.dynamodb.query" not in loaded and "aggregator.core.engine" not in loaded
    import aggregator

    assert aggregator.AggregateStore.__module__ == "aggregator.dynamodb.query"
    assert set(aggregator.__all__) == set(aggregator._EXPORTS)
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        _ = aggregator.nothing
