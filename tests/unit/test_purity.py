"""The pure core (rules, conditions, records, engine, numbers, windows) must not import the AWS SDK.

Powertools' package ``__init__`` imports ``botocore`` (for its user-agent hook) when the records
module loads its boto3-free deserializer, so the runtime check is on ``boto3``; the static check
makes sure our pure modules import neither ``boto3`` nor ``botocore`` themselves.
"""

from __future__ import annotations

import subprocess
import sys

# ``aggregator/__init__.py`` re-exports I/O modules too, so the probe registers ``aggregator`` as a
# bare package (its __init__ not executed) and imports only the pure modules.
PROBE = """
import importlib.util, sys, types
spec = importlib.util.find_spec("aggregator")
pkg = types.ModuleType("aggregator")
pkg.__path__ = list(spec.submodule_search_locations)
sys.modules["aggregator"] = pkg
import aggregator.rules, aggregator.conditions, aggregator.records, aggregator.engine
import aggregator.numbers, aggregator.config, aggregator.windows
assert "aggregator.writer" not in sys.modules
print(sorted(m for m in sys.modules if m.split(".")[0] == "boto3"))
"""


def test_pure_core_imports_no_aws_sdk():
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_pure_modules_have_no_sdk_imports():
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "aggregator"
    for name in ("rules", "conditions", "records", "engine", "numbers", "config", "windows"):
        source = (package / f"{name}.py").read_text()
        offending = [
            line
            for line in source.splitlines()
            if line.strip().startswith(("import boto", "from boto"))
        ]
        assert offending == [], name
