"""``aggregator run --follow`` says what it does while it runs, and a summary when Ctrl-C or
SIGTERM stops it (exit 130 or 143), as a long-running process should."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aggregator.dynamodb.table import create_table
from tests.factories import ddb_json

pytestmark = pytest.mark.integration

RULES = (
    "version: 1\nrules:\n  - {name: per_owner, match: {owner: {exists: true}}, key: '{owner}'}\n"
)


@pytest.mark.parametrize(
    ("signum", "code", "name"), [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")]
)
def test_follow_shows_progress_and_a_summary_when_stopped(
    ddb, dynamodb_local, tmp_path: Path, signum, code, name
):
    table = f"follow-{code}"
    create_table(ddb, table)
    for i in range(5):
        ddb.put_item(TableName=table, Item=ddb_json({"pk": f"P{i}", "sk": "S", "owner": "ann"}))
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    cli = Path(sys.executable).parent / "aggregator"
    args = [str(cli), "run", "--follow", "--table", table, "-d", str(rules)]
    env = {**os.environ, "AGGREGATOR_ENDPOINT_URL": dynamodb_local.endpoint_url}
    proc = subprocess.Popen(
        args,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # SIGINT must not be ignored in the child (it is when started without job control)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler),
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()  # the first batch prints a progress line (not a terminal)
    assert first.startswith("following: "), first
    time.sleep(1)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    last = out.strip().splitlines()[-1]
    assert last.startswith(f"stopped ({name}): processed ")
    assert "Traceback" not in err
    ddb.delete_table(TableName=table)
