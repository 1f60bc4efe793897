"""Read any measurement file: a measurement CSV, an nccl-tests table CSV, or an nccl-tests
text log, told apart by suffix and header.

>>> runs = read_measurements(
...     "validation/data/public/nccl_allreduce_8xV100_oci_bmgpu38_ocitutorials.csv")
>>> [(m.collective, m.n_ranks, m.size_bytes, m.time_s, m.in_place) for m in runs.rows]
[('allreduce', 8, 1073741824, 0.013867, False), ('allreduce', 8, 1073741824, 0.013877, True)]
>>> round(runs.rows[0].busbw_bytes_per_s / 1e9, 2)  # the log: 135.50, from the unrounded time
135.51
"""

from __future__ import annotations

from pathlib import Path

from simcoll.calibrate import nccltests
from simcoll.calibrate.measurements import (
    MeasurementSet,
    csv_rows,
    parse_measurement_csv,
    read_sidecar,
    read_text,
    select_rows,
)
from simcoll.core.errors import ConfigError
from simcoll.core.shipped import find

__all__ = ["read_measurements"]


def read_measurements(
    path: str | Path, *, collective: str | None = None, n_ranks: int | None = None
) -> MeasurementSet:
    """Read a measurement CSV, an nccl-tests table CSV, or an nccl-tests text log.

    Parameters
    ----------
    path
        A file, or the name of a shipped one (``validation/data/public``, with or
        without ``.csv``). A ``.csv`` is a measurement CSV or, told apart by its header,
        the nccl-tests table layout of ``validation/data/public``
        (``size_bytes,...,time_us_oop,...``). Any other suffix (``.log``, ``.txt``,
        ``.out``) is read as an nccl-tests log.
    collective, n_ranks
        Needed where the file does not say them (a table CSV or a log whose name does not
        name the collective). Where a measurement CSV says them, they select its rows.

    Raises
    ------
    ConfigError
        One line naming the file, the line and the field: a missing or empty file, a
        missing column, a value that is not a number, a negative size, a time that is not
        positive, fewer than one rank, an unknown collective, a malformed sidecar.
    """
    path = find(path, "measurements")  # a shipped file by name, as topologies are
    source = str(path)
    text = read_text(path)
    if not text.strip():
        raise ConfigError("empty file", source=source)
    if Path(path).suffix.lower() != ".csv":
        parsed = nccltests.parse_log(text, source=source, collective=collective, n_ranks=n_ranks)
        return MeasurementSet(source, parsed.rows, {**parsed.metadata, **read_sidecar(path)})
    header = next(csv_rows(text, source), (1, []))[1]
    if nccltests.is_table_header(header):
        rows = nccltests.parse_table_csv(
            text, source=source, collective=collective, n_ranks=n_ranks
        )
    else:
        rows = select_rows(parse_measurement_csv(text, source), source, collective, n_ranks)
    return MeasurementSet(source, rows, read_sidecar(path))
