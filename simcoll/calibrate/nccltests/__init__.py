"""nccl-tests output: its text logs and tables read as measurements (:mod:`.read`), and
measurements printed back as logs in its exact layouts (:mod:`.write`)."""

from simcoll.calibrate.nccltests.read import (
    TABLE_COLUMNS,
    TYPE_BYTES,
    Layout,
    collective_from_name,
    is_table_header,
    n_ranks_from_name,
    parse_log,
    parse_table_csv,
)
from simcoll.calibrate.nccltests.write import LogHeader, format_log, oop_ip_pairs, time_text

__all__ = [
    "TABLE_COLUMNS",
    "TYPE_BYTES",
    "Layout",
    "LogHeader",
    "collective_from_name",
    "format_log",
    "is_table_header",
    "n_ranks_from_name",
    "oop_ip_pairs",
    "parse_log",
    "parse_table_csv",
    "time_text",
]
