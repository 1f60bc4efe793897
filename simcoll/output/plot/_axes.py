"""Helpers shared by the plots: figures, saving, axes in bytes, ranks and time, row access.

matplotlib is imported lazily, inside functions, so that ``import simcoll.output.plot`` costs
nothing until a figure is drawn.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simcoll.core.errors import ConfigError
from simcoll.core.files import check_output, write_output
from simcoll.core.units import format_bytes

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))


@contextmanager
def figure(width_in: float, height_in: float) -> Iterator[tuple[Figure, Axes]]:
    """A figure with one axes (Agg backend) that is closed however the block ends."""
    import matplotlib  # noqa: PLC0415 - keep matplotlib off the import path of the library

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(width_in, height_in), layout="constrained")
    try:
        yield fig, ax
    finally:
        plt.close(fig)


#: What marks a PNG as simcoll's (a ``Software`` text chunk): only such a file is replaced.
PNG_MARK = b"Software\x00simcoll"


def save(fig: Figure, path: str | Path, *, dpi: int = 120) -> Path:
    """Write ``fig`` as a PNG at exactly ``path`` (creating parent folders); return it.

    Refused in one line (:class:`~simcoll.core.errors.ConfigError`): a name that does not
    end in ``.png``, a directory, a special file, a symlink, and an existing file simcoll
    did not write (:func:`simcoll.core.files.check_output`). The file is written whole or
    not at all.
    """
    text = str(path)
    if not text or Path(text).suffix.lower() != ".png":
        raise ConfigError(
            f"a plot is a PNG file: give a name ending in .png, got {text!r}", source=text or None
        )
    out = Path(text)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(
            f"cannot make folder {out.parent}: {error.strerror}", source=text
        ) from None
    out = check_output(out, mark=PNG_MARK)

    def write(tmp: Path) -> None:
        fig.savefig(tmp, format="png", dpi=dpi, metadata={"Software": "simcoll"})

    return write_output(out, write, mark=PNG_MARK, checked=True)


def size_axis(ax: Axes, sizes_bytes: Sequence[int], *, axis: str = "x") -> None:
    """A log2 axis of message sizes with binary-prefix tick labels (1 KiB, 1 MiB...)."""
    ticks = sorted(set(sizes_bytes))
    step = max(1, len(ticks) // 10)
    shown = ticks[::step]
    labels = [format_bytes(s).replace(" ", "\u202f") for s in shown]
    if axis == "x":
        ax.set_xscale("log", base=2)
        ax.set_xticks(shown, labels, rotation=45)
        ax.set_xlabel("message size (nccl-tests convention)")
    else:
        ax.set_yscale("log", base=2)
        ax.set_yticks(shown, labels)
        ax.set_ylabel("message size (nccl-tests convention)")


def ranks_axis(ax: Axes, n_ranks: Sequence[int], *, axis: str = "x") -> None:
    """A log2 axis of rank counts, labelled with the integers present."""
    ticks = sorted(set(n_ranks))
    step = max(1, len(ticks) // 12)
    shown = ticks[::step]
    labels = [str(n) for n in shown]
    label = "number of ranks (GPUs)"
    if axis == "x":
        ax.set_xscale("log", base=2)
        ax.set_xticks(shown, labels)
        ax.set_xticks([], minor=True)
        ax.set_xlabel(label)
    else:
        ax.set_yscale("log", base=2)
        ax.set_yticks(shown, labels)
        ax.set_yticks([], minor=True)
        ax.set_ylabel(label)


def time_unit(largest_s: float) -> tuple[float, str]:
    """``(seconds per unit, unit)`` that shows ``largest_s`` as a number of at least 1.

    >>> time_unit(2.5), time_unit(0.004), time_unit(3e-5), time_unit(2e-10)
    ((1.0, 's'), (0.001, 'ms'), (1e-06, 'µs'), (1e-09, 'ns'))
    """
    for unit, scale in _TIME_UNITS:
        if largest_s >= scale:
            return scale, unit
    return _TIME_UNITS[-1][1], _TIME_UNITS[-1][0]


def get_field(row: Any, name: str) -> Any:
    """``row[name]`` for a mapping, ``row.name`` otherwise (a :class:`~simcoll.output.results.Row`).

    >>> get_field({"n_ranks": 8}, "n_ranks")
    8

    Raises
    ------
    ValueError
        If the row has no such field.
    """
    try:
        return row[name] if isinstance(row, Mapping) else getattr(row, name)
    except (KeyError, AttributeError):
        raise ValueError(f"a row has no {name!r} field: {row!r}") from None
