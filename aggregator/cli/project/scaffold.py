"""``aggregator init``: a deployable project in a directory of the user's own.

It writes, from this package's data (so nothing needs a clone of the framework's repository):

- ``template.yaml``: the SAM template (function, event source mapping with filters, role,
  on-failure queue, log group, alarms; an existing table or a new one), its rendered regions
  filled in for the project's rules (:mod:`aggregator.cli.template`);
- ``Makefile``: the build recipe ``sam build`` runs (``make build-AggregatorFunction``, which
  calls ``aggregator build``: :mod:`aggregator.cli.project.build`);
- ``samconfig.toml``: ``build_in_source`` (SAM would otherwise copy the whole project, a
  virtualenv included, before the build picks the few files that ship);
- ``rules/example.yaml``: a starter rule file, only when ``rules/`` holds no rule file yet
  (``rules/table.yaml`` aside);
- ``rules/table.yaml``: the rule set's ``table:`` section, the table's key attribute names
  (``--keys PK/SK``, ``--keys id`` for a table with only a partition key; ``pk``/``sk`` for a new
  project without ``--keys``). With ``--keys`` and rules of one's own that declare the section
  already, it is not written: the same keys are fine, other keys an error (one file of a rule set
  declares the layout);
- ``.gitignore``: what the tools create (``.aws-sam/`` by ``sam build``, ``.cache/`` by
  ``aggregator local``'s DynamoDB Local, ``.venv/``, ``__pycache__/``). An existing one is never
  replaced: the lines it lacks are appended (a line it has, also as ``/.venv`` or negated as
  ``!.cache/``, counts as there).

It never overwrites a file that differs from what it would write unless asked (``--force``):
such a file is left alone and named, and the others are written; files already as it would write
them are left alone too, so running it twice is harmless. A ``rules/table.yaml`` exactly as init
wrote it for other keys is init's own: ``--keys`` replaces it.
"""

from __future__ import annotations

import json
import re
import tempfile
import unicodedata
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from aggregator.core.exceptions import ConfigError
from aggregator.core.text import quote

__all__ = [
    "GITIGNORE",
    "PROJECT_FILES",
    "STARTER_RULES",
    "TABLE_RULES",
    "ProjectInit",
    "gitignore_lines",
    "init_project",
    "parse_keys",
    "project_file",
    "table_rules",
]

PROJECT_FILES = ("template.yaml", "Makefile", "samconfig.toml")
"""The files ``init`` writes at the top of the project, from this package's data."""

STARTER_RULES = "rules/example.yaml"
"""The starter rule file, written when ``rules/`` has no rule file (``rules/table.yaml`` aside)."""

TABLE_RULES = "rules/table.yaml"
"""The rule file holding the ``table:`` section that ``init`` writes (package data: the same
file for ``pk``/``sk``)."""

GITIGNORE = ".gitignore"
"""Where the ignore lines go; package data ``gitignore`` (a dot file would not ship)."""

MAX_KEY_NAME_BYTES = 255
"""Longest key attribute name DynamoDB accepts, in UTF-8 bytes (Developer Guide, "Supported data
types and naming rules": partition and sort key names 1 to 255 bytes)."""


@dataclass(frozen=True, slots=True)
class ProjectInit:
    """What :func:`init_project` did: files ``written`` (new or replaced), files ``unchanged``
    (already as it would write them), files ``kept`` (there with other content, left alone),
    and the ``rules`` directory the template is rendered for. Paths are relative to the
    project directory."""

    written: tuple[str, ...]
    unchanged: tuple[str, ...]
    rules: str
    kept: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()
    """Lines appended to an existing ``.gitignore`` (a new one is among ``written``)."""
    keys: tuple[str, str | None] = ("pk", "sk")
    """The table's key names the rules now declare, ``(partition, sort or None)``."""
    keys_in: str | None = None
    """The rule file whose ``table:`` section declares them (``None``: no file does, so they
    are the default ``pk``/``sk``)."""


def project_file(name: str) -> str:
    """The text of one of this package's project files (``template.yaml``, ``Makefile``,
    ``samconfig.toml``, ``rules/example.yaml``, ``rules/table.yaml``, ``gitignore``)."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def parse_keys(text: str) -> tuple[str, str | None]:
    """``(partition key, sort key)`` names from ``PARTITION/SORT`` (``PK/SK``), or
    ``(partition key, None)`` from ``PARTITION`` alone (a table with only a partition key).

    >>> parse_keys("PK/SK"), parse_keys("id")
    (('PK', 'SK'), ('id', None))

    Raises
    ------
    ConfigError
        For more than one ``/``, an empty name, a name with spaces at its ends or control
        characters, one UTF-8 cannot encode or over :data:`MAX_KEY_NAME_BYTES` bytes, and for
        names the framework cannot use (two equal names, a name it writes on its own items:
        :class:`~aggregator.core.layout.TableLayout`).
    """
    from pydantic import ValidationError

    from aggregator.core.layout import TableLayout

    parts = text.split("/")
    if len(parts) > 2:
        raise ConfigError(
            f"--keys {quote(text)}: give PARTITION/SORT (e.g. PK/SK), or PARTITION alone for a "
            "table without a sort key"
        )
    for role, name in zip(("partition", "sort"), parts, strict=False):
        problem = _key_name_problem(name)
        if problem is not None:
            hint = ""
            if role == "sort" and not name:
                hint = f"; for a table with only a partition key, write --keys {parts[0]}"
            raise ConfigError(f"--keys {quote(text)}: the {role} key name {problem}{hint}")
    partition, sort = parts[0], (parts[1] if len(parts) == 2 else None)
    try:
        TableLayout(partition_key=partition, sort_key=sort)
    except ValidationError as exc:
        message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"--keys {quote(text)}: {message}") from None
    return partition, sort


def _key_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a key attribute name (DynamoDB's rule: 1 to 255 bytes of UTF-8),
    or is surely a typo (spaces at its ends, control characters); ``None`` when it is fine."""
    if not name:
        return "is empty"
    if name != name.strip():
        return f"{quote(name)} has spaces at its ends"
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in name):
        return f"{quote(name)} holds a control character or a lone surrogate"
    size = len(name.encode("utf-8"))
    if size > MAX_KEY_NAME_BYTES:
        return (
            f"is {size} bytes, over DynamoDB's {MAX_KEY_NAME_BYTES}-byte limit for key attribute "
            "names"
        )
    return None


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
"""Names written as plain YAML scalars (others are double-quoted)."""

_YAML_WORDS = {"null", "true", "false", "yes", "no", "on", "off", "y", "n"}
"""Plain words some YAML reader could take for something other than text."""


def _yaml_text(name: str) -> str:
    """``name`` as a YAML scalar that reads back as that text with any YAML loader."""
    if _PLAIN.fullmatch(name) and name.lower() not in _YAML_WORDS:
        return name
    return json.dumps(name, ensure_ascii=False)  # JSON strings are YAML double-quoted scalars


def table_rules(partition_key: str, sort_key: str | None) -> str:
    """The text of ``rules/table.yaml`` for these key names (``sort_key=None``: a table with only
    a partition key): the package's file with its two key lines replaced."""
    text = project_file(TABLE_RULES)
    sort = "null" if sort_key is None else _yaml_text(sort_key)
    text = re.sub(
        r"(?m)^  partition_key: .*$", f"  partition_key: {_yaml_text(partition_key)}", text
    )
    return re.sub(r"(?m)^  sort_key: .*$", f"  sort_key: {sort}", text)


def gitignore_lines(existing: str | None) -> list[str]:
    """The package's ignore lines that ``existing`` (a ``.gitignore``'s text, ``None``: no file)
    lacks. A line counts as there written with or without its leading or trailing ``/``, and
    negated (``!.cache/``: the user wants it tracked)."""
    wanted = [line for line in project_file("gitignore").splitlines() if _pattern(line)]
    if existing is None:
        return wanted
    have = {_pattern(line.strip().removeprefix("!")) for line in existing.splitlines()}
    return [line for line in wanted if _pattern(line) not in have]


def _pattern(line: str) -> str:
    """An ignore line's pattern as compared: no comment, no surrounding ``/``."""
    line = line.strip()
    return "" if line.startswith("#") else line.strip("/")


def _rule_files(directory: Path) -> list[Path]:
    """The rule files of ``directory`` (none when it is missing)."""
    from aggregator.core.rules import rule_files_in

    return rule_files_in(directory) if directory.is_dir() else []


def init_project(
    directory: Path, *, force: bool = False, keys: tuple[str, str | None] | None = None
) -> ProjectInit:
    """Write a deployable project into ``directory`` (created if missing).

    The template is rendered for the rules in ``directory/rules`` (the starter file when there
    are none) with the table's keys, so the project builds as written.

    A file there with other content is left alone (``kept``) unless ``force``; a
    ``.gitignore`` gets the lines it lacks appended (``ignored``).

    Parameters
    ----------
    keys
        The table's key names, ``(partition, sort)`` or ``(partition, None)``
        (:func:`parse_keys`), written as ``rules/table.yaml``; ``None``: ``pk``/``sk`` for a
        new project, else the rules' own ``table:`` section (if any) stands.

    Raises
    ------
    ConfigError
        When a path is not writable, or is a directory, or ``keys`` differ from the keys a rule
        file of one's own (other than ``rules/table.yaml``) declares.
    RuleError
        When the rules already in ``rules/`` are invalid (nothing is written then).
    """
    from aggregator.cli.template import render_template
    from aggregator.core.rules import load_rules

    table_path = directory / TABLE_RULES
    own = [p for p in _rule_files(directory / "rules") if p != table_path]
    planned_rules = _planned_rules(directory, own, keys)
    states = {name: _state(directory / name, text) for name, text in planned_rules.items()}
    if states.get(TABLE_RULES) == "conflict" and _is_inits_own(table_path):
        states[TABLE_RULES] = "new"  # init's own file, for other keys: --keys replaces it
    # the rule files as they will be: the template is rendered for them
    with tempfile.TemporaryDirectory() as scratch:
        # rule file as read -> its name in the project
        paths: dict[Path, str] = {p: p.relative_to(directory).as_posix() for p in own}
        for name, text in planned_rules.items():
            path: Path = directory / name
            if states[name] == "new" or (states[name] == "conflict" and force):
                path = Path(scratch) / Path(name).name
                path.write_text(text, encoding="utf-8")
            paths[path] = name
        if TABLE_RULES not in planned_rules and table_path.exists():
            paths[table_path] = TABLE_RULES
        # in the order `load_rules(rules/)` reads them: by name
        ordered = sorted(paths.items(), key=lambda item: Path(item[1]).name)
        rules = load_rules([read for read, _ in ordered])
        keys_in = next((name for path, name in paths.items() if _declares(path)), None)
    layout = rules.layout

    planned: dict[str, str] = {name: project_file(name) for name in PROJECT_FILES}
    planned["template.yaml"] = render_template(
        planned["template.yaml"], rules, source="template.yaml"
    )
    states.update({name: _state(directory / name, text) for name, text in planned.items()})
    if states["template.yaml"] == "conflict":
        # rendered for other rules (or keys) but otherwise as shipped: rendering its regions
        # again, as `aggregator template` would, loses nothing of the user's
        try:
            there = (directory / "template.yaml").read_text(encoding="utf-8")
            shipped = render_template(there, rules, source="template.yaml")
        except (ConfigError, OSError, UnicodeDecodeError):
            shipped = None  # not a template init could have written
        if shipped == planned["template.yaml"]:
            states["template.yaml"] = "new"
    planned.update(planned_rules)
    written: list[str] = []
    for name, text in planned.items():
        if states[name] == "new" or (states[name] == "conflict" and force):
            _write(directory / name, text)
            written.append(name)
    ignored = _update_gitignore(directory / GITIGNORE)
    if ignored is None:
        written.append(GITIGNORE)
        ignored = []
    elif not ignored:
        states[GITIGNORE] = "same"
    order = [*PROJECT_FILES, STARTER_RULES, TABLE_RULES, GITIGNORE]
    return ProjectInit(
        written=tuple(sorted(written, key=order.index)),
        unchanged=tuple(n for n in order if states.get(n) == "same"),
        rules="rules",
        kept=() if force else tuple(n for n in order if states.get(n) == "conflict"),
        ignored=tuple(ignored),
        keys=(layout.partition_key, layout.sort_key),
        keys_in=keys_in,
    )


def _planned_rules(
    directory: Path, own: list[Path], keys: tuple[str, str | None] | None
) -> dict[str, str]:
    """The rule files init would write: the starter without rules of one's own; the table
    section for ``keys`` (for ``pk``/``sk`` in a new project), unless a rule file of one's own
    declares one already.

    Raises
    ------
    ConfigError
        When that file declares other keys than ``keys``.
    """
    from aggregator.core.rules import declared_layout

    planned: dict[str, str] = {}
    if not own:
        planned[STARTER_RULES] = project_file(STARTER_RULES)
    declared = [(p, layout) for p in own if (layout := declared_layout(p)) is not None]
    if keys is not None and declared:
        where, layout = declared[0]
        theirs = (layout.partition_key, layout.sort_key)
        if theirs != keys:
            raise ConfigError(
                f"{where}: its table: section declares the keys {_keys_text(theirs)}, not "
                f"{_keys_text(keys)}; change them there (one file of the rule set declares the "
                "table layout)"
            )
    elif keys is not None:
        planned[TABLE_RULES] = table_rules(*keys)
    elif not own and not (directory / TABLE_RULES).exists():
        planned[TABLE_RULES] = table_rules("pk", "sk")
    return planned


def _declares(path: Path) -> bool:
    """Whether the (valid) rule file ``path`` has a ``table:`` section."""
    from aggregator.core.rules import declared_layout

    return declared_layout(path) is not None


def _update_gitignore(path: Path) -> list[str] | None:
    """Write ``.gitignore`` (``None``: it was new), or append the lines it lacks (those
    lines; none when it has them all).

    Raises
    ------
    ConfigError
        When it cannot be read as UTF-8 text, or written.
    """
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; aggregator init writes a file there")
    if not path.exists():
        _write(path, project_file("gitignore"))
        return None
    existing = _read_text(path)
    missing = gitignore_lines(existing)
    if missing:
        joiner = "\n" if existing and not existing.endswith("\n") else ""
        header = "# What the tools create (appended by `aggregator init`)\n"
        _write(path, existing + joiner + header + "".join(f"{line}\n" for line in missing))
    return missing


def _keys_text(keys: tuple[str, str | None]) -> str:
    return keys[0] if keys[1] is None else f"{keys[0]}/{keys[1]}"


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; aggregator init appends lines to it") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None


def _state(path: Path, text: str) -> str:
    """``new`` (no file), ``same`` (already ``text``) or ``conflict`` (other content).

    Raises
    ------
    ConfigError
        When ``path`` is a directory.
    """
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; aggregator init writes a file there")
    if not path.exists():
        return "new"
    try:
        same = path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        same = False
    return "same" if same else "conflict"


def _is_inits_own(path: Path) -> bool:
    """Whether ``path`` is exactly a ``rules/table.yaml`` that init writes, for some keys."""
    from aggregator.core.exceptions import RuleError
    from aggregator.core.rules import declared_layout

    try:
        layout = declared_layout(path)
        text = path.read_text(encoding="utf-8")
    except (RuleError, OSError, UnicodeDecodeError):
        return False
    return layout is not None and text == table_rules(layout.partition_key, layout.sort_key)


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write: {exc.strerror}") from None
