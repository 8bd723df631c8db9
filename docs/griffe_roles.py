"""Griffe extension: the Sphinx roles of the package's docstrings become cross-references.

The docstrings (numpy style) refer to each other with Sphinx's roles, ``:class:`RuleSet```,
``:meth:`~aggregator.AggregateStore.window```, ``:mod:`aggregator.dynamodb.targets``` and the
like, which mkdocstrings does not read (no released Griffe extension or mkdocstrings option
does). Before mkdocstrings renders them, this extension rewrites each role into an autorefs
cross-reference:

- the target is resolved the way Python resolves the name where the docstring is written (the
  object's members, then its parents' and the module's imports: Griffe's ``Object.resolve``), or
  as an absolute path from the package's root;
- the reference is "optional" to autorefs: a link to the object's entry when the site renders
  it (the Python API page), else the name as code with its full path as the tooltip (a private
  helper has no page to link to);
- a name that resolves to nothing in the package, nor to a builtin or another package's import,
  is a warning, so ``mkdocs build --strict`` fails on a misspelled role;
- the title is Sphinx's: the path as written, only its last part after ``~``, an explicit
  ``title <target>``; functions and methods get ``()``.

mkdocs.yml loads it through the Python handler's ``extensions`` option.
"""

from __future__ import annotations

import builtins
import html
import importlib.util
import re
from collections.abc import Iterator
from functools import partial
from typing import Any

import griffe

ROLE = re.compile(
    r":(?:py:)?(?P<role>class|func|meth|attr|exc|mod|data|obj|const):`(?P<text>[^`]+)`"
)
EXPLICIT_TITLE = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")
CALLABLE_ROLES = {"func", "meth"}


def _objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)  # type: ignore[arg-type]


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring of the loaded package."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        for obj in _objects(pkg):
            docstring = obj.docstring
            if docstring is None or ":`" not in docstring.value:
                continue
            docstring.value = ROLE.sub(partial(_reference, obj, loader=loader), docstring.value)
            docstring.__dict__.pop("parsed", None)  # parsed (cached) from the new text

    # griffe 1.x names the hook on_package_loaded (2.x: on_package); rewriting twice changes nothing
    def on_package_loaded(
        self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any
    ) -> None:
        self.on_package(pkg=pkg, loader=loader, **kwargs)


def _reference(obj: griffe.Object, match: re.Match[str], *, loader: griffe.GriffeLoader) -> str:
    role, text = match["role"], " ".join(match["text"].split())
    if explicit := EXPLICIT_TITLE.match(text):
        title, target = explicit["title"], explicit["target"]
    else:
        target = text.replace(" ", "")  # a role wrapped across lines in the source
        title = target.removeprefix("~")
        if target.startswith("~"):
            title = title.rpartition(".")[2]
        if role in CALLABLE_ROLES and not title.endswith(")"):
            title += "()"
    target = target.replace(" ", "").removeprefix("~").removeprefix(".").removesuffix("()")
    code = f"<code>{html.escape(title)}</code>"
    path = _resolve(obj, target, loader)
    if path is None:
        griffe.logger.warning(
            "%s: %s does not resolve to an object (in the scope of %s)",
            obj.relative_filepath if obj.is_module else obj.path,
            match[0],
            obj.path,
        )
        return code
    if path.split(".")[0] != obj.package.name:
        return code  # a builtin or another package's object: no page here
    return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'


def _resolve(obj: griffe.Object, target: str, loader: griffe.GriffeLoader) -> str | None:
    """The canonical path of ``target`` named in ``obj``'s docstring, or None."""
    head, _, rest = target.partition(".")
    try:
        base = obj.resolve(head)
    except griffe.NameResolutionError:
        if head == obj.package.name:
            base = head
        elif hasattr(builtins, head):
            return f"builtins.{target}"
        elif importlib.util.find_spec(head) is not None:
            return target  # a full path into another package (decimal.Decimal.quantize)
        else:
            return None
    path = f"{base}.{rest}" if rest else base
    if path.split(".")[0] != obj.package.name:
        return path  # imported from elsewhere: not checked further
    try:
        found = loader.modules_collection[path]
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    return found.canonical_path
