"""Sums the property test's per-part figures (written to ``AGGREGATOR_SOAK_DIR`` by each part)
and fails unless every scenario ran without drift. ``make soak`` runs it after the parts::

    python -m tests.integration.soak_report .cache/soak 1000
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    directory, wanted = Path(argv[0]), int(argv[1])
    totals = {"scenarios": 0, "drift": 0, "records": 0, "faults": 0, "malformed": 0}
    parts = sorted(directory.glob("part-*.json"))
    for part in parts:
        for key, value in json.loads(part.read_text()).items():
            totals[key] = totals.get(key, 0) + value
    print(
        f"property soak: {totals['scenarios']} scenarios in {len(parts)} parts, "
        f"{totals['records']} stream records, {totals['faults']} injected faults and retries, "
        f"{totals['malformed']} malformed records, drift in {totals['drift']} scenarios"
    )
    if totals["scenarios"] < wanted:
        print(f"error: {wanted} scenarios were asked for", file=sys.stderr)
        return 1
    return 1 if totals["drift"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
