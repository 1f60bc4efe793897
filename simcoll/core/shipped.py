"""The files simcoll ships (topologies, their parameters, scenarios, model shapes, public
measurements),
found by name wherever simcoll is installed.

In a clone they are the repository's own folders; in a wheel they are packaged under
``simcoll/_data`` with the same layout (``pyproject.toml``'s ``force-include``), so that a
scenario's ``../topologies/...`` and a topology's ``calibration/...`` still resolve.

>>> data_root().joinpath("topologies", "dgx-a100.toml").is_file()
True
>>> find("dgx-a100", "topologies").name
'dgx-a100.toml'
>>> find("no/such/thing.toml", "topologies")  # a path is taken as given
PosixPath('no/such/thing.toml')
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["FOLDERS", "KINDS", "data_root", "find", "is_bare_name", "shipped_names"]

#: The folders of shipped files a name may be looked up in, and their files' suffix.
FOLDERS = {
    "topologies": ("topologies", ".toml"),
    "scenarios": ("scenarios", ".toml"),
    "models": ("models", ".toml"),
    "measurements": ("validation/data/public", ".csv"),
}
KINDS = tuple(FOLDERS)
_PACKAGE = Path(__file__).resolve().parents[1]


def data_root() -> Path:
    """The folder holding ``topologies/``, ``scenarios/`` and ``validation/data/public/``:
    the installed package's ``_data`` in a wheel, else the repository."""
    packaged = _PACKAGE / "_data"
    return packaged if packaged.is_dir() else _PACKAGE.parent


def is_bare_name(path: str | Path) -> bool:
    """Whether ``path`` is a bare name (``dgx-a100``): no folder and no suffix."""
    text = str(path)
    return bool(text) and "/" not in text and "\\" not in text and not Path(text).suffix


def shipped_names(kind: str) -> list[str]:
    """The names of the shipped files of ``kind`` (:data:`KINDS`)."""
    name, suffix = FOLDERS[kind]
    folder = data_root() / name
    return sorted(p.stem for p in folder.glob(f"*{suffix}")) if folder.is_dir() else []


def find(path: str | Path, kind: str) -> Path:
    """``path`` itself where it names a file, or is more than a name (it has a folder);
    else the shipped file of ``kind`` of that name, with or without its suffix
    (``llama3-8b``, ``llama3-8b.toml``), if there is one (else ``path`` unchanged, for
    the caller to report as missing).

    >>> find("nccl_allreduce_8xA100_nvswitch_superbench", "measurements").parent.name
    'public'
    >>> find("llama3-8b.toml", "models") == find("llama3-8b", "models")
    True
    """
    given = Path(path)
    text = str(path)
    folder, suffix = FOLDERS[kind]
    try:
        if not text or given.exists() or "/" in text or "\\" in text:
            return given
        name = text if given.suffix == suffix else f"{text}{suffix}"
        shipped = data_root() / folder / name
        return shipped if shipped.is_file() else given
    except OSError:  # a name too long for the file system: the caller's read says so
        return given
