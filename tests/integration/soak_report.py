"""Sums the property tests' per-part figures (written to ``AGGREGATOR_SOAK_DIR`` by each part)
and fails unless every scenario ran without drift. ``make soak`` runs it after the parts::

    python -m tests.integration.soak_report .cache/soak 1000            # test_property.py
    python -m tests.integration.soak_report .cache/soak 400 backfill   # backfill_property.py
    python -m tests.integration.soak_report .cache/soak 500 shards     # shards_property.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    directory, wanted = Path(argv[0]), int(argv[1])
    kind = argv[2] if len(argv) > 2 else "property"
    totals: dict[str, int] = {"scenarios": 0, "drift": 0}
    pattern = {"property": "part-*.json", "shards": "shards-*.json"}.get(kind, "backfill-*.json")
    parts = sorted(directory.glob(pattern))
    for part in parts:
        for key, value in json.loads(part.read_text()).items():
            totals[key] = totals.get(key, 0) + value
    if kind == "property":
        print(
            f"property soak: {totals['scenarios']} scenarios in {len(parts)} parts, "
            f"{totals.get('records', 0)} stream records, {totals.get('faults', 0)} injected "
            f"faults and retries, {totals.get('malformed', 0)} malformed records, drift in "
            f"{totals['drift']} scenarios"
        )
    elif kind == "shards":
        print(
            f"multi-shard soak: {totals['scenarios']} scenarios in {len(parts)} parts, "
            f"{totals.get('records', 0)} stream records over {totals.get('shards', 0)} shards, "
            f"{totals.get('faults', 0)} injected faults and retries, drift in "
            f"{totals['drift']} scenarios"
        )
    else:
        print(
            f"backfill soak: {totals['scenarios']} scenarios in {len(parts)} parts, "
            f"{totals.get('items', 0)} items scanned, {totals.get('first_old', 0)} counted at "
            f"their state from the stream, {totals.get('killed', 0)} backfills killed and "
            f"resumed, drift in {totals['drift']} scenarios"
        )
    if totals["scenarios"] < wanted:
        print(f"error: {wanted} scenarios were asked for", file=sys.stderr)
        return 1
    return 1 if totals["drift"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
