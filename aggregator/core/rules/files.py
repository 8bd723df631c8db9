"""Loading rule files: reading (size and UTF-8 checked), parsing and validating them into a
:class:`~aggregator.core.rules.ruleset.RuleSet` with :func:`load_rules`.

Loading a file or a directory and building rules in Python give the same validated
:class:`~aggregator.core.rules.ruleset.RuleSet`. Every validation problem raises
:class:`~aggregator.core.exceptions.RuleError` whose message names the file, the rule and the
field.

Loading is hardened against hostile or broken files: a file over :data:`MAX_RULE_FILE_BYTES`, a
file that is not UTF-8, control characters, a document expanding to more than
:data:`~aggregator.core.rules.yaml_parser.MAX_YAML_NODES` nodes through aliases or merge keys
("billion laughs"), a recursive alias, or nesting deeper than
:data:`~aggregator.core.rules.yaml_parser.MAX_YAML_DEPTH` is rejected in bounded time and memory,
with one line per problem naming the file (and the line and column, or the rule and field).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from aggregator.core.exceptions import RuleError
from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout
from aggregator.core.rules.messages import one_line, rule_name
from aggregator.core.rules.model import Rule
from aggregator.core.rules.problems import format_errors
from aggregator.core.rules.ruleset import (
    RuleSet,
    derived_attribute_indexes,
    graph_problems,
    reading_field,
    target_problems,
)
from aggregator.core.rules.yaml_parser import RuleFileLimitError, RuleLoader
from aggregator.core.text import MAX_REASON_CHARS

MAX_RULE_FILE_BYTES = 1024 * 1024
"""Largest rule file read (1 MiB); a larger one is rejected before parsing."""


def _source_name(path: Path | str) -> str:
    """A file name for messages, on one line."""
    return one_line(str(path), limit=10 * MAX_REASON_CHARS)


def _position(text: str | bytes, offset: int) -> tuple[int, int]:
    """1-based ``(line, column)`` of ``offset`` in ``text`` (columns in characters)."""
    newline = "\n" if isinstance(text, str) else b"\n"
    line_start = text.rfind(newline, 0, offset) + 1  # type: ignore[arg-type]
    before = text[line_start:offset]
    if isinstance(before, bytes):
        before = before.decode("utf-8", errors="replace")
    return text.count(newline, 0, offset) + 1, len(before) + 1  # type: ignore[arg-type]


def _read_rule_file(path: Path, source: str) -> str:
    """The text of a rule file: at most :data:`MAX_RULE_FILE_BYTES`, strictly UTF-8 (a
    leading byte order mark is allowed).

    Raises
    ------
    RuleError
        When it cannot be read, is too large, or is not UTF-8 (naming line, column, byte
        offset and the bad byte).
    """
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_RULE_FILE_BYTES + 1)
            if len(raw) > MAX_RULE_FILE_BYTES:
                size = os.fstat(file.fileno()).st_size
                shown = f"{size} bytes" if size > MAX_RULE_FILE_BYTES else "larger"
                raise RuleError(
                    f"{source}: the file is {shown}, over the {MAX_RULE_FILE_BYTES}-byte (1 MiB) "
                    "limit for a rule file; split the rules into several files"
                )
    except OSError as exc:
        raise RuleError(
            f"{source}: cannot read rule file: {one_line(exc.strerror or str(exc))}"
        ) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, column = _position(raw, exc.start)
        hint = ""
        if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
            hint = " (it starts with a UTF-16 byte order mark)"
        raise RuleError(
            f"{source}: line {line}, column {column} (byte {exc.start}): byte "
            f"0x{raw[exc.start]:02x} is not valid UTF-8 ({exc.reason}); rule files must be "
            f"UTF-8{hint}"
        ) from None


def _parse_yaml(text: str, source: str) -> Any:
    """The YAML document of a rule file, through :class:`RuleLoader`.

    Raises
    ------
    RuleError
        One line with line and column: syntax errors, control characters, the loader's limits;
        never a ``RecursionError``.
    """
    try:
        return yaml.load(text, Loader=RuleLoader)  # a SafeLoader subclass
    except yaml.reader.ReaderError as exc:
        line, column = _position(text, exc.position)
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        escape = f"\\x{char:02x}" if char < 0x100 else f"\\u{char:04x}"
        raise RuleError(
            f"{source}: line {line}, column {column}: invalid YAML: character "
            f"{chr(char)!r} (U+{char:04X}) is not allowed in YAML; remove it, or write "
            f'"{escape}" inside a double-quoted string'
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        context_mark = getattr(exc, "context_mark", None)
        if isinstance(exc, yaml.composer.ComposerError) and exc.context and context_mark:
            # "second occurrence" / "but found another document" need their first half
            problem = f"{exc.context} on line {context_mark.line + 1}, {problem}"
        problem = one_line(problem, limit=300)
        kind = "" if isinstance(exc, RuleFileLimitError) else "invalid YAML: "
        raise RuleError(f"{source}: {where}{kind}{problem}") from None
    except RecursionError:  # only when called near the recursion limit: the depth limit is far
        raise RuleError(
            f"{source}: the document nests too deeply to read; rule files need far fewer levels"
        ) from None


def _load_file(path: Path) -> tuple[list[Rule], TableLayout | None]:
    """The rules of one file (the derived-rule graph is checked by :func:`load_rules`) and the
    table layout it declares, if it has a ``table:`` section.

    Raises
    ------
    RuleError
        One line per problem, each naming the file.
    """
    source = _source_name(path)
    data = _parse_yaml(_read_rule_file(path, source), source)
    if data is None:
        raise RuleError(f"{source}: field 'rules': the file is empty; expected 'rules: [...]'")
    if not isinstance(data, Mapping):
        raise RuleError(
            f"{source}: field '(top level)': expected a mapping with a 'rules' list, "
            f"got {type(data).__name__}"
        )
    # top-level keys starting with "x-" are the file's own (a place for YAML anchors, as in
    # Compose files): left out of validation
    data = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("x-"))}
    problems = []
    if isinstance(data.get("rules"), list) and not data["rules"]:
        problems.append(f"{source}: field 'rules': the list is empty; give at least one rule")
    if "rules" not in data and "table" not in data:  # a file may hold only the table layout
        problems.append(f"{source}: field 'rules': Field required")
    try:
        ruleset = RuleSet.model_validate(data, context={"partial": True})
    except ValidationError as exc:
        problems.append(format_errors(exc, source, data))
    except RecursionError:  # as above; validation recurses less deeply than composing
        problems.append(f"{source}: the rules nest too deeply to validate")
    if problems:
        error = RuleError("\n".join(problems))
        error.stubs = _stubs(data.get("rules"))  # type: ignore[attr-defined]
        raise error
    return list(ruleset.rules), ruleset.layout if "table" in data else None


def declared_layout(path: str | Path) -> TableLayout | None:
    """The table layout one rule file declares in its ``table:`` section, or ``None`` when it
    has none (the file is validated whole, as :func:`load_rules` reads it).

    Raises
    ------
    RuleError
        When the file is not a valid rule file.
    """
    return _load_file(Path(path))[1]


@dataclass(frozen=True, slots=True)
class _Stub:
    """The name and source of a rule whose file failed to validate: enough to check the
    derived-rule graph across the rule set all the same (:func:`graph_problems`)."""

    name: str
    source: str | None


def _stubs(raw_rules: Any) -> list[_Stub]:
    """The named rules of a file's raw ``rules`` list (entries without a usable name or with
    a non-text source are left out: their own errors say why)."""
    stubs = []
    for raw in raw_rules if isinstance(raw_rules, list) else []:
        if isinstance(raw, Mapping) and isinstance(raw.get("name"), str):
            source = raw.get("source")
            if source is None or isinstance(source, str):
                stubs.append(_Stub(raw["name"], source))
    return stubs


def rule_files_in(directory: Path) -> list[Path]:
    """The rule files of a directory: its top-level ``*.yaml`` and ``*.yml`` files, sorted by
    name (not recursive), as :func:`load_rules` reads a directory."""
    return sorted(p for p in directory.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml"))


def load_rules(
    path: str | Path | Iterable[str | Path], *, layout: TableLayout = DEFAULT_LAYOUT
) -> RuleSet:
    """Load and validate rules from a YAML file, a directory of YAML files, or several paths.

    Parameters
    ----------
    path
        A ``.yaml``/``.yml`` file; a directory (every ``*.yaml`` and ``*.yml`` in it, sorted by
        name, not recursive); or an iterable of such paths. Each file holds
        ``{version: 1, rules: [...], table: {...}}`` (``version`` optional; ``rules`` with at
        least one rule, or only ``table``); at most one file declares the ``table`` layout
        (:class:`~aggregator.core.layout.TableLayout`).
    layout
        The table layout when no file declares one (it also names the attributes of aggregate
        items that derived rules may read: :func:`derived_attribute_indexes`).

    Returns
    -------
    RuleSet
        At least one rule.

    Raises
    ------
    RuleError
        With one line per problem, each naming the file (and the rule and field, or the line
        and column), e.g. ``definitions/flights.yaml: rule 'by_carrier', field 'key': ...``;
        also when a rule name appears in two files, a derived rule's source is unknown, forms a
        cycle or lacks an attribute the rule reads, a directory has no rule files, or the paths
        hold no rule at all. Files are read within the limits of :class:`RuleLoader` and
        :data:`MAX_RULE_FILE_BYTES`.
    """
    paths = _rule_paths(path)
    read = _read_files(paths, layout)
    rules, layout, errors = read.rules, read.layout, read.errors
    if not errors:
        problems = graph_problems(rules) or derived_attribute_indexes(rules, layout)
        for index, message in problems:
            name = reading_field(rules[index], message)
            errors.append(
                f"{read.origin[rules[index].name]}: rule {rule_name(rules[index].name)}, "
                f"field {name!r}: {message}"
            )
    else:
        # a file that failed still names its rules: report the graph's problems too, so one run
        # shows every problem (each name once: duplicates are reported already)
        errors += _problems_of_named(read.named, errors)
    if not errors:
        errors += [
            f"{read.origin[rules[index].name]}: rule {rule_name(rules[index].name)}, "
            f"field {name!r}: {message}"
            for index, name, message in target_problems(rules, layout)
        ]
    if not errors and not layout.has_sort_key:
        errors += [
            f"{read.origin[r.name]}: rule {rule_name(r.name)}, field 'write_shards': needs a table "
            "with a sort key (this table: section has sort_key: null): the partials of an "
            "aggregate share an item collection"
            for r in rules
            if r.sharded
        ]
        errors += [
            f"{read.origin[r.name]}: rule {rule_name(r.name)}, field 'partitions': needs a table "
            "with a sort key (this table: section has sort_key: null): without one every "
            "aggregate has a partition key value of its own already"
            for r in rules
            if r.spread > 1
        ]
    if errors:
        raise RuleError("\n".join(errors))
    if not rules:
        where = ", ".join(_source_name(p) for p in paths) or "no paths given"
        raise RuleError(f"{where}: no rules; give at least one rule")
    return RuleSet(rules=tuple(rules), layout=layout)


def _rule_paths(path: str | Path | Iterable[str | Path]) -> list[Path]:
    """The files :func:`load_rules` reads, each once, in order.

    Raises
    ------
    RuleError
        For a path that does not exist, or a directory without rule files.
    """
    paths: list[Path] = []
    inputs = [path] if isinstance(path, str | Path) else list(path)
    for item in inputs:
        p = Path(item)
        if p.is_dir():
            found = rule_files_in(p)
            if not found:
                raise RuleError(
                    f"{_source_name(p)}: no rule files (*.yaml, *.yml) in this directory"
                )
            paths.extend(found)
        elif p.exists():
            paths.append(p)
        else:
            raise RuleError(f"{_source_name(p)}: no such file or directory")
    # a file named twice (-d rules -d rules/a.yaml) is read once
    once: dict[Path, Path] = {}
    for p in paths:
        once.setdefault(p.resolve(), p)
    return list(once.values())


@dataclass(slots=True)
class _Read:
    """What the files held: their valid rules (names unique, with their file), the layout,
    every named rule valid or not (the graph is checked over all of them), and the problems."""

    layout: TableLayout
    rules: list[Rule] = field(default_factory=list)
    origin: dict[str, str] = field(default_factory=dict)
    named: list[tuple[Any, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _read_files(paths: list[Path], layout: TableLayout) -> _Read:
    """Read each file; one declares the layout (else ``layout`` stands)."""
    read = _Read(layout)
    declared: str | None = None
    for p in paths:
        where = _source_name(p)
        try:
            file_rules, file_layout = _load_file(p)
        except RuleError as exc:
            read.errors.append(str(exc))
            read.named += [(stub, where) for stub in getattr(exc, "stubs", [])]
            continue
        read.named += [(r, where) for r in file_rules]
        if file_layout is not None:
            if declared is not None:
                read.errors.append(
                    f"{where}: field 'table': the table layout is already declared in "
                    f"{declared}; declare it in one file of the rule set"
                )
            else:
                declared, read.layout = where, file_layout
        for r in file_rules:
            if r.name in read.origin:
                read.errors.append(
                    f"{where}: rule {rule_name(r.name)}, field 'name': duplicate rule "
                    f"name (also defined in {read.origin[r.name]})"
                )
                continue
            read.origin[r.name] = where
            read.rules.append(r)
    return read


def _problems_of_named(named: list[tuple[Any, str]], errors: list[str]) -> list[str]:
    """The duplicate names (not yet in ``errors``) and the graph's problems among every rule the
    files named, valid or not: one run shows every problem."""
    found: list[str] = []
    unique: dict[str, tuple[Any, str]] = {}
    for r, where in named:
        first = unique.setdefault(r.name, (r, where))
        said = f"{where}: rule {rule_name(r.name)}, field 'name': duplicate rule name"
        stub = isinstance(r, _Stub) or isinstance(first[0], _Stub)
        reported = any(line.startswith(said) for e in (*errors, *found) for line in e.splitlines())
        if first[0] is not r and stub and not reported:
            also = "in this file" if first[1] == where else f"defined in {first[1]}"
            found.append(
                f"{where}: rule {rule_name(r.name)}, field 'name': duplicate rule name "
                f"(also {also})"
            )
    everything = list(unique.values())
    for index, message in graph_problems([r for r, _ in everything]):
        r, where = everything[index]
        found.append(f"{where}: rule {rule_name(r.name)}, field 'source': {message}")
    return found
