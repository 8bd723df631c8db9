"""Benchmarks of ddb-aggregator on DynamoDB Local (not part of the installed package).

``python -m bench.write_modes`` compares the write strategies on the flights replay; see
``bench/README.md``.
"""
