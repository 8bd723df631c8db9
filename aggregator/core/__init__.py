"""The pure core: rules, conditions, records, the engine, numbers, windows and the table layout.

No AWS SDK and no I/O but reading rule files (an import contract in ``pyproject.toml``).
"""
