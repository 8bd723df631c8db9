"""What an operator runs against a live table, from the CLI or Python: backfill, reconcile,
rebuild, drop-rule and status.

Never shipped to Lambda, and independent of the Lambda runtime (:mod:`aggregator.runtime`):
import contracts in ``pyproject.toml``.
"""
