"""``aggregator init``: a deployable project in a directory of the user's own.

It writes, from this package's data (so nothing needs a clone of the framework's repository):

- ``template.yaml``: the SAM template (function, event source mapping with filters, role,
  on-failure queue, log group, alarms; an existing table or a new one), its rendered regions
  filled in for the project's rules (:mod:`aggregator.cli.template`);
- ``Makefile``: the build recipe ``sam build`` runs (``make build-AggregatorFunction``, which
  calls ``aggregator build``: :mod:`aggregator.cli.project.build`);
- ``samconfig.toml``: ``build_in_source`` (SAM would otherwise copy the whole project, a
  virtualenv included, before the build picks the few files that ship);
- ``rules/example.yaml``: a starter rule file, only when ``rules/`` holds no rule file yet.

It never overwrites a file that differs from what it would write unless asked (``--force``):
such a file is left alone and named, and the others are written; files already as it would write
them are left alone too, so running it twice is harmless.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from aggregator.core.exceptions import ConfigError

__all__ = ["PROJECT_FILES", "STARTER_RULES", "ProjectInit", "init_project", "project_file"]

PROJECT_FILES = ("template.yaml", "Makefile", "samconfig.toml")
"""The files ``init`` writes at the top of the project, from this package's data."""

STARTER_RULES = "rules/example.yaml"
"""The starter rule file, written when ``rules/`` has no rule file."""


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


def project_file(name: str) -> str:
    """The text of one of this package's project files (``template.yaml``, ``Makefile``,
    ``samconfig.toml``, ``rules/example.yaml``)."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _has_rule_files(directory: Path) -> bool:
    from aggregator.core.rules import rule_files_in

    return directory.is_dir() and bool(rule_files_in(directory))


def init_project(directory: Path, *, force: bool = False) -> ProjectInit:
    """Write a deployable project into ``directory`` (created if missing).

    The template is rendered for the rules in ``directory/rules`` (the starter file when there
    are none), so the project builds as written.

    A file there with other content is left alone (``kept``) unless ``force``.

    Raises
    ------
    ConfigError
        When a path is not writable, or is a directory.
    RuleError
        When the rules already in ``rules/`` are invalid (nothing is written then).
    """
    from aggregator.cli.template import render_template
    from aggregator.core.rules import load_rules

    rules_dir = directory / "rules"
    planned: dict[str, str] = {name: project_file(name) for name in PROJECT_FILES}
    starter = not _has_rule_files(rules_dir)
    if starter:
        planned[STARTER_RULES] = project_file(STARTER_RULES)
        with resources.as_file(resources.files(__package__).joinpath(STARTER_RULES)) as path:
            rules = load_rules(path)
    else:
        rules = load_rules(rules_dir)
    planned["template.yaml"] = render_template(
        planned["template.yaml"], rules, source="template.yaml"
    )
    unchanged = []
    conflicts = []
    for name, text in planned.items():
        path = directory / name
        if path.is_dir():
            raise ConfigError(f"{path}: is a directory; aggregator init writes a file there")
        if path.exists():
            try:
                same = path.read_text(encoding="utf-8") == text
            except (OSError, UnicodeDecodeError):
                same = False
            if same:
                unchanged.append(name)
            else:
                conflicts.append(name)
    kept = [] if force else conflicts
    written = []
    for name, text in planned.items():
        if name in unchanged or name in kept:
            continue
        path = directory / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot write: {exc.strerror}") from None
        written.append(name)
    return ProjectInit(tuple(written), tuple(unchanged), "rules", tuple(kept))
