"""The documentation site as built: it browses from disk (``site/index.html`` under ``file://``).

The module builds the site itself, strictly, into a temporary directory (a few seconds), so it
checks the docs and docstrings of this checkout and never a stale or missing ``site/``:

- every internal ``href``/``src`` of every page names an existing file (never a directory, which
  ``file://`` shows as a listing), and every ``#fragment`` an ``id`` of that page;
- no page loads a script, stylesheet or font from another host (nothing works offline then), and
  offline search is wired: the index inlined as a script, the worker shim served from the site;
- no raw Sphinx role (``:class:``, ``:func:``, ``:meth:`` ...) is left from the docstrings;
- no build debris (``__pycache__``, ``.pyc``, the hooks' ``.py``);
- the CLI reference's summary of every command is a whole sentence: its ``short_help``;
- the rule reference's sections are headings (its table of contents lists them), not paragraphs
  opening with a bold title;
- no navigation entry is titled by a file name.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import click
import pytest

from aggregator.cli import main

ROOT = Path(__file__).resolve().parents[2]
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|exc|mod|data|obj|const):")
# elements whose attribute names a resource the browser loads or a page the reader opens
LINK_ATTRIBUTES = {"a": "href", "link": "href", "script": "src", "img": "src", "source": "src"}
# elements whose text is code: a role mentioned there (docs/development.md) is not a raw role
CODE_ELEMENTS = {"code", "pre", "script", "style"}


@dataclass
class Page:
    """What the checks need of one built HTML page."""

    links: list[tuple[str, str]] = field(default_factory=list)  # (tag, URL)
    ids: set[str] = field(default_factory=set)
    text: list[str] = field(default_factory=list)  # outside code elements
    nav_titles: list[str] = field(default_factory=list)
    summaries: list[tuple[str, str]] = field(default_factory=list)  # CLI reference: (name, text)


class _PageParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = Page()
        self._open: list[str] = []
        self._nav_link = 0  # depth inside <a class="md-nav__link">
        self._nav_text: list[str] = []
        # a CLI reference's "Subcommands" item, <li><em><a href="#aggregator-...">name</a></em>: ...
        self._summary: list[str] | None = None
        self._summary_first: str | None = None  # the item's first tag
        self._summary_href = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if (attribute := LINK_ATTRIBUTES.get(tag)) and values.get(attribute):
            self.page.links.append((tag, values[attribute] or ""))
        if values.get("id"):
            self.page.ids.add(values["id"] or "")
        if tag == "a" and "md-nav__link" in (values.get("class") or "").split():
            self._nav_link, self._nav_text = 1, []
        elif self._nav_link and tag not in {"br", "img", "input"}:
            self._nav_link += 1
        if tag == "li":
            self._summary, self._summary_first, self._summary_href = [], None, ""
        elif self._summary is not None and self._summary_first is None:
            self._summary_first = tag
        elif tag == "a" and self._summary_first == "em" and not self._summary_href:
            self._summary_href = values.get("href") or ""
        if tag not in {"br", "img", "input", "link", "meta", "hr"}:
            self._open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._nav_link:
            self._nav_link -= 1
            if not self._nav_link and (title := " ".join("".join(self._nav_text).split())):
                self.page.nav_titles.append(title)
        if tag == "li" and self._summary is not None:
            item = "".join(self._summary)
            match = re.fullmatch(r"\s*(?P<name>[\w-]+): (?P<text>.*)", item, re.S)
            if match and self._summary_href.startswith("#aggregator-"):
                self.page.summaries.append((match["name"], " ".join(match["text"].split())))
            self._summary = None
        if tag in self._open:
            while self._open.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        if self._nav_link:
            self._nav_text.append(data)
        if self._summary is not None:
            self._summary.append(data)
        if not CODE_ELEMENTS.intersection(self._open):
            self.page.text.append(data)


def _parse(path: Path) -> Page:
    parser = _PageParser()
    parser.feed(path.read_text(encoding="utf-8"))
    parser.close()
    return parser.page


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as `make docs` builds it (mkdocs.yml is strict), into a temporary dir."""
    site_dir = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr}"
    return site_dir


@pytest.fixture(scope="module")
def pages(site: Path) -> dict[Path, Page]:
    # 404.html is a web server's page for any missing URL: its links are absolute from the root
    found = {path: _parse(path) for path in sorted(site.rglob("*.html")) if path.name != "404.html"}
    assert site / "index.html" in found, "the site has no index.html"
    assert len(found) >= 20, f"only {len(found)} pages built"
    return found


def _internal(url: str) -> bool:
    parts = urlsplit(url)
    return not (parts.scheme or parts.netloc)


def test_internal_links_resolve_to_files(site: Path, pages: dict[Path, Page]) -> None:
    broken = []
    checked = 0
    for path, page in pages.items():
        for tag, url in page.links:
            if not _internal(url):
                continue
            parts = urlsplit(url)
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            checked += 1
            where = f"{path.relative_to(site)}: <{tag}> {url}"
            if not target.is_relative_to(site.resolve()):
                broken.append(f"{where} (outside the site)")
            elif not target.is_file():
                broken.append(f"{where} ({'a directory' if target.is_dir() else 'missing'})")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{where} (no id {parts.fragment!r})")
    assert checked > 1000, f"only {checked} internal links found"
    assert not broken, f"{len(broken)} internal links do not open from disk:\n" + "\n".join(
        broken[:40]
    )


def test_nothing_loads_from_another_host(site: Path, pages: dict[Path, Page]) -> None:
    remote = [
        f"{path.relative_to(site)}: <{tag}> {url}"
        for path, page in pages.items()
        for tag, url in page.links
        if tag in {"script", "link", "img", "source"} and not _internal(url)
    ]
    assert not remote, "resources a page read offline cannot load:\n" + "\n".join(remote[:20])


def test_search_works_offline(site: Path, pages: dict[Path, Page]) -> None:
    # file:// allows neither fetching search_index.json nor starting a Web Worker: the offline
    # plugin inlines the index as a script, and the iframe-worker shim runs the worker
    index_script = (site / "search" / "search_index.js").read_text(encoding="utf-8")
    assert index_script.startswith("var __index = ")
    index = json.loads(index_script.removeprefix("var __index = "))
    locations = {doc["location"].partition("#")[0] for doc in index["docs"]}
    assert {"index.html", "cli.html", "api.html", "rules/index.html"} <= locations
    bundle = next((site / "assets" / "javascripts").glob("bundle.*.min.js"))
    assert "search/search_index.js" in bundle.read_text(encoding="utf-8")
    for path, page in pages.items():
        scripts = [url for tag, url in page.links if tag == "script"]
        shim = [url for url in scripts if url.endswith("iframe-worker/shim.js")]
        assert shim, f"{path.relative_to(site)} does not load the worker shim"
        assert scripts.index(shim[0]) < next(
            i for i, url in enumerate(scripts) if "/bundle." in url or url.startswith("bundle.")
        ), f"{path.relative_to(site)}: the shim must load before the theme's bundle"


def test_no_raw_sphinx_roles(site: Path, pages: dict[Path, Page]) -> None:
    raw = {
        str(path.relative_to(site)): sorted(set(ROLE.findall(" ".join(page.text))))
        for path, page in pages.items()
        if ROLE.search(" ".join(page.text))
    }
    assert not raw, f"raw Sphinx roles in the built pages: {raw}"
    api = pages[site / "api.html"]
    # the roles became links to the objects' entries on the page
    assert sum(1 for _, url in api.links if url.startswith("#aggregator.")) > 50


def test_no_build_debris(site: Path) -> None:
    debris = sorted(
        str(path.relative_to(site))
        for path in site.rglob("*")
        if path.name == "__pycache__" or path.suffix in {".py", ".pyc"}
    )
    assert not debris, f"build debris in the site: {debris}"


def _commands(group: click.Group) -> Iterator[tuple[str, click.Command]]:
    for name, command in group.commands.items():
        if not command.hidden:
            yield name, command
            if isinstance(command, click.Group):
                yield from _commands(command)


def test_cli_reference_summaries_are_whole_sentences(site: Path, pages: dict[Path, Page]) -> None:
    summaries = pages[site / "cli.html"].summaries
    commands = dict(_commands(main))
    assert {name for name, _ in summaries} == set(commands)
    for name, text in summaries:
        assert text == commands[name].short_help, f"{name}: {text!r}"
        assert re.search(r"[.)]$", text), f"{name}: the summary does not end a sentence: {text!r}"


def test_navigation_titles_are_not_file_names(site: Path, pages: dict[Path, Page]) -> None:
    titles = pages[site / "index.html"].nav_titles
    assert "Getting started" in titles
    assert not [title for title in titles if title.endswith(".md")], titles


def test_rule_reference_sections_are_headings(site: Path, pages: dict[Path, Page]) -> None:
    rule_pages = sorted((site / "rules").glob("*.html"))
    assert len(rule_pages) >= 5
    for path in rule_pages:
        bold_titles = re.findall(r"<p><strong>([^<]*)</strong>", path.read_text(encoding="utf-8"))
        assert not bold_titles, f"{path.relative_to(site)}: bold paragraphs, not headings"
    toc = [url for _, url in pages[site / "rules" / "index.html"].links if url.startswith("#")]
    for anchor in ("#fields", "#top-lists-leaderboard_store-list", "#match-language", "#keys"):
        assert anchor in toc, f"the rule reference's table of contents lacks {anchor}"
