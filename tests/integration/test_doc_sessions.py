"""Every console session in the documentation, run on DynamoDB Local and compared with the
docs' text (``tests/sessions/runner.py`` says how; ``make docs-sessions`` re-records them)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.sessions.runner import (
    DOCS,
    ROOT,
    UPDATE_VARIABLE,
    Session,
    pages,
    report,
    rewrite,
    run_page,
    session_environment,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_console_sessions(page: Path, dynamodb_local, ddb, tmp_path: Path) -> None:
    # a scratch directory as a user's project: the virtualenv and the demo's rule files
    (tmp_path / ".venv").symlink_to(sys.prefix)
    (tmp_path / "definitions").symlink_to(ROOT / "definitions")
    before = set(ddb.list_tables()["TableNames"])
    session = Session(tmp_path, session_environment(dynamodb_local.endpoint_url))
    try:
        blocks = run_page(page, session)
    finally:
        session.close()
        for name in set(ddb.list_tables()["TableNames"]) - before:
            ddb.delete_table(TableName=name)
    if os.environ.get(UPDATE_VARIABLE):
        text = page.read_text()
        page.write_text(rewrite(text, blocks))
        return
    differences = report(page, blocks)
    if differences:
        pytest.fail(
            f"the console sessions of {page.relative_to(ROOT)} print something else now "
            f"(re-record them all with `make docs-sessions`, then review the diff):\n"
            f"{differences}",
            pytrace=False,
        )
