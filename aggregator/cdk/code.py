"""The function's code for :class:`~aggregator.cdk.AggregatorFunction`: the artifact of
``aggregator build`` (:func:`aggregator.cli.project.build.build_function`), built on this machine
when the app is synthesized (CDK local bundling, no Docker: :class:`LocalBuild`) or given
prebuilt and checked (:func:`check_artifact`).

Sources: AWS CDK API reference, ``ILocalBundling`` and ``aws_lambda.Code.from_asset`` (local
bundling).
"""

from __future__ import annotations

import filecmp
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

from aggregator.cli.project.build import DEFINITIONS_DIR, FunctionRuntime, build_function
from aggregator.core.exceptions import ConfigError

__all__ = ["LocalBuild", "check_artifact", "function_code"]


@jsii.implements(ILocalBundling)
class LocalBuild:
    """Builds the artifact into CDK's bundling directory on this machine (no Docker): CDK calls
    :meth:`try_bundle` through jsii when it stages the asset, before it would try Docker.

    Parameters
    ----------
    files
        The rule files.
    boto3
        As ``aggregator build --boto3``.
    runtime
        The function's runtime and architecture (what pip installs the dependencies for).
    """

    def __init__(self, files: Sequence[Path], boto3: str, runtime: FunctionRuntime) -> None:
        self._files = tuple(f.resolve() for f in files)
        self._boto3 = boto3
        self._runtime = runtime
        self.error: Exception | None = None
        """What the build raised (jsii hands the caller a ``RuntimeError`` with its text)."""

    def try_bundle(self, output_dir: str, *, image: DockerImage, **options: Any) -> bool:
        """Build into ``output_dir``; ``True`` (built here), or raise.

        Raises
        ------
        ConfigError
            As :func:`aggregator.cli.project.build.build_function` (pip failing).
        """
        try:
            build_function(
                self._files,
                Path(output_dir),
                template=None,
                runtime=self._runtime,
                boto3=self._boto3,
            )
        except Exception as exc:
            self.error = exc
            raise
        return True


def function_code(
    files: Sequence[Path],
    artifact: str | os.PathLike[str] | None,
    local_build: LocalBuild | None,
    runtime: lambda_.Runtime,
) -> lambda_.Code:
    """The function's code: ``artifact`` as it is, or what ``local_build`` builds when CDK stages
    the asset (``runtime``'s bundling image is named, never run).

    Raises
    ------
    ConfigError
        When ``artifact`` is not ``aggregator build``'s artifact of ``files``
        (:func:`check_artifact`).
    """
    if artifact is not None:
        directory = Path(artifact)
        check_artifact(directory, files)
        return lambda_.Code.from_asset(str(directory))
    return lambda_.Code.from_asset(
        # the asset's source: unused by the local build, which reads the rule files itself
        str(files[0].parent.resolve()),
        # hashed by what was built (the package, the rules and the installed dependencies), so
        # an unchanged build deploys nothing
        asset_hash_type=AssetHashType.OUTPUT,
        bundling=BundlingOptions(
            # never run: the local build always succeeds or raises
            image=runtime.bundling_image,
            local=local_build,
        ),
    )


def check_artifact(directory: Path, files: Sequence[Path]) -> None:
    """Refuse a directory that is not ``aggregator build``'s artifact of ``files``.

    Raises
    ------
    ConfigError
        When ``aggregator/handler.py`` is missing, or ``definitions/`` holds other rule files
        (or other contents) than ``files``.
    """
    if not (directory / "aggregator" / "handler.py").is_file():
        raise ConfigError(
            f"{directory}: not an artifact of aggregator build (no aggregator/handler.py)"
        )
    shipped = directory / DEFINITIONS_DIR
    found = sorted(p.name for p in shipped.iterdir()) if shipped.is_dir() else []
    expected = sorted(f.name for f in files)
    differ = [
        f.name for f in files if f.name in found and not filecmp.cmp(f, shipped / f.name, False)
    ]
    if found != expected or differ:
        raise ConfigError(
            f"{directory}: built for other rules than {', '.join(map(str, files))} ("
            f"{DEFINITIONS_DIR}/ holds {', '.join(found) or 'nothing'}"
            + (f"; {', '.join(differ)} differ" if differ else "")
            + "); rebuild it: aggregator build -d RULES --output DIR"
        )
