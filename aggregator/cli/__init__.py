"""The ``aggregator`` command line; :mod:`aggregator.cli.main` holds the command group."""

from aggregator.cli.main import main

__all__ = ["main"]
