"""The console sessions of every other page of the documentation (the pages with sessions, in
order; test_doc_sessions_a.py runs the others), run on DynamoDB Local and compared with the
docs' text (``tests/sessions/runner.py`` says how; ``make docs-sessions`` re-records them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sessions.runner import DOCS, check_page, pages

# a few thousand items per module: a DynamoDB Local of its own (tests/conftest.py)
pytestmark = [pytest.mark.integration, pytest.mark.own_dynamodb_local]


@pytest.mark.parametrize("page", pages(1), ids=lambda p: str(p.relative_to(DOCS)))
def test_console_sessions(page: Path, dynamodb_local, tmp_path: Path) -> None:
    check_page(page, dynamodb_local.endpoint_url, tmp_path)
