"""The console sessions of the documentation, run as tests: ``runner`` (parse, run, compare,
re-record) and ``data`` (the items that hidden set-up steps write)."""
