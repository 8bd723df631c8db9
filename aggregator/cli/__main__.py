"""``python -m aggregator.cli``: the ``aggregator`` command."""

from aggregator.cli.main import main

if __name__ == "__main__":  # pragma: no cover
    main()
