"""The Lambda artifact of a project's function (``aggregator build``, run by ``sam build``).

What ships, into ``output``:

- ``aggregator/``: the *installed* aggregator package (wherever this CLI imports it from: a wheel
  in a virtualenv, or an editable checkout) without ``aggregator/cli``, ``aggregator/dev``,
  ``aggregator/cdk`` and ``aggregator/deploy``, which neither handler imports (import-linter
  contracts keep it so); ``aggregator/operations`` ships for the backfill function
  (:mod:`aggregator.backfill_handler`), and the stream handler never imports it;
- ``definitions/``: the rule files (top-level ``*.yaml``/``*.yml`` of each directory, or files),
  where the template's ``DefinitionsPath`` (default ``definitions``) points the function;
- the package's runtime dependencies (its distribution metadata, less the CLI-only ``click`` and
  ``rich``), installed by pip for the function's Python version and architecture as the
  template's ``Runtime`` and ``Architectures`` name them (``--platform manylinux2014_<arch>
  --only-binary=:all:``: a wheel built for this machine would not load there), at the versions
  installed here wherever they are installed (a constraints file): the function runs what the
  project was tested with;
- bytecode for every module of the artifact, compiled by a Python of the runtime's version
  (this one, or ``python3.N`` on the ``PATH``) in ``checked-hash`` mode (PEP 552: valid whatever
  modification times the zip gives the files). A function's code directory is read-only (only
  ``/tmp`` is writable: Lambda Developer Guide, "Configure ephemeral storage for Lambda
  functions"), so without it every cold start compiles each module it imports from source and
  cannot keep the result: about half a second more for the handler's imports and the first
  DynamoDB client (``python -m bench.cold_start`` measures the import). With no such Python
  here the artifact ships without bytecode, and :class:`FunctionBuild` says so.

Before anything is written, the rules are validated and the template is checked to be rendered
for them (:func:`aggregator.cli.template.check_template_regions`), so a template rendered for
other rules (other filters, other grants) is never deployed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import yaml

from aggregator.core.exceptions import ConfigError
from aggregator.core.rules import RuleSet, load_rules, rule_files_in

__all__ = [
    "CLI_ONLY_DEPENDENCIES",
    "DEFINITIONS_DIR",
    "DISTRIBUTION",
    "FunctionBuild",
    "FunctionRuntime",
    "build_function",
    "function_runtime",
    "lambda_requirements",
    "rule_files",
    "runtime_python",
]

DISTRIBUTION = "ddb-aggregator"
"""The distribution (``pip install ddb-aggregator``) whose package and dependencies ship."""

CLI_ONLY_DEPENDENCIES = frozenset({"click", "rich"})
"""Dependencies only the CLI imports: they do not ship to Lambda."""

DEFINITIONS_DIR = "definitions"
"""Where the rule files land in the artifact: the function's ``AGGREGATOR_DEFINITIONS`` (the
template's ``DefinitionsPath`` default, the handler's own default)."""

_NOT_SHIPPED = frozenset({"cli", "dev", "cdk", "deploy"})
"""Subpackages of ``aggregator`` neither handler imports (import-linter contracts in
``pyproject.toml``): the CLI, the dev tools, the CDK construct (which deploys the artifact) and
the deploy-time tools. (The operator jobs ship: the backfill function runs the distributed
backfill's tasks.)"""

_RUNTIME_BOTO3 = frozenset({"boto3"})

RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer")
"""The AWS SDK the Lambda Python runtimes include (Lambda Developer Guide, "Lambda runtimes":
the runtime's SDK for Python): with ``--boto3 runtime`` the artifact ships none of them."""


def _remove_distributions(output: Path, names: Sequence[str]) -> None:
    """Delete the packages ``names`` (and their ``*.dist-info``) pip installed into ``output``."""
    for name in names:
        shutil.rmtree(output / name, ignore_errors=True)
        for info in output.glob(f"{name}-*.dist-info"):
            shutil.rmtree(info, ignore_errors=True)


"""Left to the Lambda runtime's own copy with ``--boto3 runtime`` (botocore and s3transfer go
with it: nothing else of ours requires them)."""

_FUNCTION = "AggregatorFunction"


@dataclass(frozen=True, slots=True)
class FunctionRuntime:
    """The function's runtime as the template declares it: ``python_version`` (``"3.12"``) and
    ``platform`` (pip's ``manylinux2014_aarch64`` or ``manylinux2014_x86_64``)."""

    python_version: str
    platform: str

    @classmethod
    def of(
        cls, runtime: object, architecture: object = "x86_64", *, where: str = "the function"
    ) -> FunctionRuntime:
        """The runtime of a function declared in Lambda's words: ``runtime`` ``python3.N``,
        ``architecture`` ``x86_64`` or ``arm64`` (Lambda Developer Guide, "Lambda runtimes" and
        "Selecting and configuring an instruction set architecture").

        Raises
        ------
        ConfigError
            When ``runtime`` is not a literal Python runtime or ``architecture`` is unknown
            (the message starts with ``where`` and names what was found).
        """
        if runtime is None:
            raise ConfigError(
                f"{where} has no literal Runtime (a !Ref, or one under Globals, cannot be read "
                "here); set Runtime: python3.N on the function itself"
            )
        if not isinstance(runtime, str) or not runtime.startswith("python3."):
            raise ConfigError(
                f"{where}'s Runtime is {runtime!r}; the aggregator needs a literal python3.N "
                "runtime"
            )
        arch = {"arm64": "aarch64", "x86_64": "x86_64"}.get(str(architecture))
        if arch is None:
            raise ConfigError(f"{where}'s Architectures is {architecture!r}; arm64 or x86_64")
        return cls(runtime.removeprefix("python"), f"manylinux2014_{arch}")


@dataclass(frozen=True, slots=True)
class FunctionBuild:
    """What :func:`build_function` wrote: the rule files shipped, the requirements installed,
    the artifact's size in bytes and files, and the Python that compiled its bytecode (``None``:
    none shipped)."""

    rule_files: tuple[str, ...]
    requirements: tuple[str, ...]
    size_bytes: int
    files: int
    bytecode_by: str | None = None


class _CfnLoader(yaml.SafeLoader):
    """Reads a CloudFormation template: intrinsic functions (``!Ref``, ``!If``...) become
    ``None``; only literal properties are read."""


_CfnLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def function_runtime(template: Path) -> FunctionRuntime:
    """The ``Runtime`` and ``Architectures`` of the template's ``AggregatorFunction``.

    Lambda's architectures are ``x86_64`` (the default) and ``arm64`` (Lambda Developer Guide,
    "Selecting and configuring an instruction set architecture"); Python runtimes are named
    ``python3.N`` ("Lambda runtimes").

    Raises
    ------
    ConfigError
        When the template cannot be read, has no ``AggregatorFunction``, or names a runtime that
        is not Python or an unknown architecture.
    """
    try:
        document = yaml.load(template.read_text(encoding="utf-8"), Loader=_CfnLoader)
    except OSError as exc:
        raise ConfigError(f"{template}: cannot read the template: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{template}: not a YAML template: {exc}") from None
    resources = document.get("Resources") if isinstance(document, dict) else None
    function = resources.get(_FUNCTION) if isinstance(resources, dict) else None
    properties = function.get("Properties") if isinstance(function, dict) else None
    if not isinstance(properties, dict):
        raise ConfigError(f"{template}: no resource {_FUNCTION} with Properties")
    architectures = properties.get("Architectures") or ["x86_64"]
    return FunctionRuntime.of(
        properties.get("Runtime"), architectures[0], where=f"{template}: {_FUNCTION}"
    )


def rule_files(paths: Iterable[Path]) -> list[Path]:
    """The rule files that ship from ``paths``: each directory's top-level ``*.yaml`` and
    ``*.yml`` (sorted), each file itself.

    Raises
    ------
    ConfigError
        When a path does not exist, two files share a name (they land in one directory), or
        there are no rule files at all.
    """
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += rule_files_in(path)
        elif path.is_file():
            files.append(path)
        else:
            raise ConfigError(f"{path}: no such rule file or directory")
    names: dict[str, Path] = {}
    for file in files:
        first = names.setdefault(file.name, file)
        if first != file:
            raise ConfigError(
                f"two rule files named {file.name} ({first} and {file}): they would land in one "
                "directory; rename one"
            )
    if not files:
        raise ConfigError("no rule files (*.yaml, *.yml) in " + ", ".join(str(p) for p in paths))
    return files


def lambda_requirements(*, boto3: str = "bundle") -> list[str]:
    """The requirements of :data:`DISTRIBUTION` the function needs: its runtime dependencies
    (extras' dependencies and :data:`CLI_ONLY_DEPENDENCIES` left out; with ``boto3="runtime"``
    boto3 too), as written in its metadata, e.g. ``"pydantic<3,>=2.10"``.

    Raises
    ------
    ConfigError
        When the distribution is not installed (the CLI runs from a bare checkout).
    """
    try:
        declared = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        raise ConfigError(
            f"the {DISTRIBUTION} distribution is not installed here: pip install it (or pip "
            "install -e . in its checkout) to build the function"
        ) from None
    left_out = CLI_ONLY_DEPENDENCIES | (_RUNTIME_BOTO3 if boto3 == "runtime" else frozenset())
    requirements = []
    for text in declared:
        marker = text.partition(";")[2]
        if re.search(r"\bextra\b", marker):
            continue
        name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", text.strip())
        if name is None or _canonical(name.group()) in left_out:
            continue
        requirements.append(text.strip())
    return requirements


def _canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed_versions() -> list[str]:
    """``name==version`` of every distribution installed here (pip constraints)."""
    pins = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and _canonical(name) != DISTRIBUTION:
            pins[_canonical(name)] = f"{name}=={dist.version}"
    return sorted(pins.values())


def _copy_package(output: Path) -> None:
    import aggregator

    source = Path(aggregator.__file__).resolve().parent
    target = output / "aggregator"
    shutil.rmtree(target, ignore_errors=True)

    def ignore(directory: str, names: list[str]) -> set[str]:
        left_out = {n for n in names if n == "__pycache__" or n.endswith((".pyc", ".pyo"))}
        if Path(directory).resolve() == source:
            left_out |= _NOT_SHIPPED & set(names)
        return left_out

    shutil.copytree(source, target, ignore=ignore)


def _pip_install(
    output: Path, requirements: Sequence[str], runtime: FunctionRuntime, *, pin: bool
) -> None:
    """Install ``requirements`` into ``output`` for the function's platform.

    Raises
    ------
    ConfigError
        When pip is missing or fails (its last lines are in the message).
    """
    with tempfile.TemporaryDirectory() as scratch:
        command = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-warn-conflicts",
            "--no-compile",
            "--upgrade",
            "--target",
            str(output),
            "--platform",
            runtime.platform,
            "--implementation",
            "cp",
            "--python-version",
            runtime.python_version,
            "--only-binary=:all:",
        ]
        if pin:
            constraints = Path(scratch) / "constraints.txt"
            constraints.write_text("\n".join(_installed_versions()) + "\n", encoding="utf-8")
            command += ["--constraint", str(constraints)]
        try:
            result = subprocess.run(
                [*command, *requirements], capture_output=True, text=True, check=False
            )
        except OSError as exc:
            raise ConfigError(f"cannot run pip ({sys.executable} -m pip): {exc}") from None
    if result.returncode != 0:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        if any("No module named pip" in line for line in lines):
            raise ConfigError(
                f"pip is not installed in this environment ({sys.executable}); install it "
                "(python -m ensurepip, or uv pip install pip) to build the function"
            )
        tail = " | ".join(lines[-3:]) or f"exit {result.returncode}"
        raise ConfigError(
            f"pip could not install the function's dependencies for {runtime.platform}, "
            f"Python {runtime.python_version}: {tail}"
        )
    shutil.rmtree(output / "bin", ignore_errors=True)


def runtime_python(version: str) -> str | None:
    """A Python interpreter of ``version`` (``"3.12"``) to compile the artifact's bytecode with:
    this one when it is of that version, else ``python3.N`` on the ``PATH`` if it runs and is
    of that version (a pyenv shim of a version not selected does not run); ``None`` when there
    is none. Bytecode depends on the version only, not on the architecture."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return sys.executable
    found = shutil.which(f"python{version}")
    if found is None:
        return None
    probe = "import sys; print(f'{sys.version_info.major}.{sys.version_info.minor}')"
    try:
        result = subprocess.run(
            [found, "-c", probe], capture_output=True, text=True, check=False, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return found if result.returncode == 0 and result.stdout.strip() == version else None


TASK_ROOT = "/var/task"
"""Where Lambda unpacks the function's code (``LAMBDA_TASK_ROOT``; Lambda Developer Guide,
"Defined runtime environment variables"): the path the bytecode records for its sources, so
that an artifact's bytes do not depend on where it was built (an unchanged build hashes the
same, and CDK deploys nothing)."""


def _compile_bytecode(output: Path, python: str) -> bool:
    """Compile every module under ``output`` with ``python``, ``checked-hash`` (PEP 552), each
    recording its path under :data:`TASK_ROOT`. Returns whether the package's own modules got
    their bytecode (a module that does not compile, such as a file a package ships for another
    Python version, is left to its source, as pip leaves it).
    """
    options = ["-q", "-q", "-j", "0", "--invalidation-mode", "checked-hash"]
    paths = ["-s", str(output), "-p", TASK_ROOT]
    try:
        subprocess.run(
            [python, "-m", "compileall", *options, *paths, str(output)],
            capture_output=True,
            check=False,
            timeout=600,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return any((output / "aggregator" / "__pycache__").glob("__init__.*.pyc"))


def _remove_bytecode(output: Path) -> None:
    """Remove the bytecode an earlier build left in ``output``."""
    for cache in list(output.rglob("__pycache__")):
        shutil.rmtree(cache, ignore_errors=True)


def _check_output(output: Path, sources: Iterable[Path]) -> None:
    """Refuse an artifact directory that holds the build's own sources (the project directory,
    or a checkout the package is installed from in editable mode): the build replaces its
    ``aggregator/`` and ``definitions/`` and writes bytecode throughout it.

    Raises
    ------
    ConfigError
        Naming the first source inside ``output``.
    """
    target = output.resolve()
    for source in sources:
        if source.resolve().is_relative_to(target):
            raise ConfigError(
                f"{output}: the artifact directory holds {source}, which the build would "
                "overwrite; give --output a directory of its own (sam build gives one)"
            )


def _size(output: Path) -> tuple[int, int]:
    files = [p for p in output.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def build_function(
    definitions: Sequence[Path],
    output: Path,
    *,
    template: Path | None,
    runtime: FunctionRuntime | None = None,
    boto3: str = "bundle",
    dependencies: bool = True,
    pin: bool = True,
    bytecode: bool = True,
) -> FunctionBuild:
    """Build the function's artifact into ``output`` (see the module docstring).

    Parameters
    ----------
    definitions
        Rule files or directories (as ``-d``).
    output
        The artifact directory (SAM's ``ARTIFACTS_DIR``); created if missing. What an earlier
        build left there is replaced.
    template
        The SAM template: checked to be rendered for the rules, and the source of the runtime
        unless ``runtime`` is given. ``None`` skips the check (``runtime`` is then required).
    boto3
        ``"bundle"`` ships boto3 (about 26 MB unzipped with botocore); ``"runtime"`` leaves it
        to the Lambda runtime's own copy.
    dependencies
        ``False`` skips pip (the code and rules only).
    pin
        Constrain the dependencies to the versions installed here.
    bytecode
        Ship bytecode compiled for the runtime's Python (when :func:`runtime_python` finds
        one); ``False`` ships sources only.

    Raises
    ------
    RuleError
        When the rules are invalid.
    ConfigError
        When the template is not rendered for the rules (naming the command that renders it),
        or as :func:`rule_files`, :func:`function_runtime` and pip's install.
    """
    from aggregator.cli.template import check_template_regions

    files = rule_files(definitions)
    rules: RuleSet = load_rules(files)
    if template is not None:
        if not check_template_regions(template, rules):
            sources = " ".join(f"-d {p}" for p in definitions)
            raise ConfigError(
                f"{template}: not rendered for the rules in {', '.join(map(str, definitions))}; "
                f"run: aggregator template {sources} {template}"
            )
        runtime = runtime or function_runtime(template)
    if runtime is None:
        raise ConfigError("no template to read the function's runtime from")
    import aggregator

    package = Path(aggregator.__file__).resolve().parent  # an editable checkout's sources
    _check_output(output, [*files, *([template] if template is not None else []), package])
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"{output}: cannot create the artifact directory: {exc.strerror}"
        ) from None
    _copy_package(output)
    shipped = output / DEFINITIONS_DIR
    shutil.rmtree(shipped, ignore_errors=True)
    shipped.mkdir()
    for file in files:
        shutil.copyfile(file, shipped / file.name)
    requirements = lambda_requirements(boto3=boto3) if dependencies else []
    if requirements:
        _pip_install(output, requirements, runtime, pin=pin)
    if boto3 == "runtime":
        # a dependency (aws-xray-sdk) brings botocore back: the runtime's own copy serves
        _remove_distributions(output, RUNTIME_PROVIDED)
    python = runtime_python(runtime.python_version) if bytecode else None
    _remove_bytecode(output)
    if python is not None and not _compile_bytecode(output, python):
        _remove_bytecode(output)
        python = None
    size, count = _size(output)
    return FunctionBuild(tuple(f.name for f in files), tuple(requirements), size, count, python)
