"""An output folder shared with the user: a manifest of what simcoll wrote, and a lock.

``simcoll run --out DIR`` and ``simcoll compare --out DIR`` write several files into one
folder, which may also hold the user's own files. :class:`OutputFolder` keeps them apart:

- the manifest (:data:`MANIFEST`, a hidden JSON file) lists every file simcoll wrote
  there, recorded *before* the file is written; only listed files are ever replaced or
  deleted (:meth:`OutputFolder.clear`), and only names of the command's own pattern;
- a name simcoll is about to write that exists but is not listed is the user's: the
  command refuses (:meth:`OutputFolder.reserve`), with ``--force`` or without;
- the folder is locked (``flock`` on the folder itself) while a command writes into it,
  so two commands never mix their files: the second one is refused at once;
- files are written whole (:func:`simcoll.core.files.write_output`) and never through a
  symbolic link.

>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> _ = (root / "photo.jpg").write_bytes(b"mine")
>>> with OutputFolder.open(root, pattern=r"table\\.txt") as folder:
...     path = folder.write_text("table.txt", "simcoll's table\\n")
...     folder.others()
['photo.jpg']
>>> with OutputFolder.open(root, pattern=r"table\\.txt") as folder:
...     folder.clear()
['table.txt']
>>> sorted(p.name for p in root.iterdir())
['.simcoll-manifest.json', 'photo.jpg']
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO

from simcoll.core.errors import ConfigError
from simcoll.core.files import check_output, read_input_text, write_output

__all__ = ["MANIFEST", "OutputFolder"]

#: The manifest's file name, in the folder it describes.
MANIFEST = ".simcoll-manifest.json"
_MANIFEST_KEY = "simcoll_manifest"
_MANIFEST_MARK = f'"{_MANIFEST_KEY}"'.encode()
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)?")


class OutputFolder:
    """A locked output folder and the manifest of simcoll's files in it.

    Use :meth:`open` (a context manager); ``pattern`` is a regular expression that every
    name the command writes matches in full (``results\\.csv|table\\.txt|...``): nothing
    else is ever deleted, whatever the manifest says.
    """

    def __init__(self, path: Path, fd: int, pattern: str) -> None:
        self.path = path
        self._fd = fd
        self._pattern = re.compile(pattern)
        self._files: set[str] = self._read_manifest()

    @classmethod
    def open(cls, path: str | Path, *, pattern: str, flag: str = "--out") -> OutputFolder:
        """Make the folder if needed, lock it, and read its manifest.

        Raises ConfigError: an empty name, a path that is not a folder, a folder another
        simcoll command is writing into, a manifest that is not simcoll's.
        """
        text = str(path)
        if not text:
            raise ConfigError("an empty folder name; give a folder (. for this one)", field=flag)
        folder = Path(text)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileExistsError:
            raise ConfigError("is not a folder", source=text) from None
        except NotADirectoryError:
            raise ConfigError("is not a folder", source=text) from None
        except OSError as error:
            raise ConfigError(f"cannot use it: {error.strerror}", source=text) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise ConfigError(
                    "another simcoll command is writing into this folder; wait for it or "
                    f"choose another {flag}",
                    source=text,
                ) from None
            raise ConfigError(f"cannot lock it: {error.strerror}", source=text) from None
        try:
            return cls(folder, fd, pattern)
        except BaseException:
            os.close(fd)
            raise

    def close(self) -> None:
        """Release the lock."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- what is whose ---------------------------------------------------------------------

    @property
    def owned(self) -> list[str]:
        """Names the manifest lists (simcoll wrote them), sorted."""
        return sorted(self._files)

    def others(self) -> list[str]:
        """Names in the folder (top level) that simcoll did not write, sorted."""
        tops = {name.split("/")[0] for name in self._files}
        return sorted(p.name for p in self.path.iterdir() if p.name not in {*tops, MANIFEST})

    def is_own(self, name: str) -> bool:
        """Whether ``name`` is listed in the manifest."""
        return name in self._files

    def clear(self) -> list[str]:
        """Delete the files simcoll wrote (its manifest's, of its pattern); return them."""
        removed = []
        for name in sorted(self._files, key=lambda n: -n.count("/")):
            path = self.path / name
            if not self._deletable(name):
                continue
            with contextlib.suppress(FileNotFoundError):
                info = path.lstat()
                if stat.S_ISREG(info.st_mode):
                    path.unlink()
                    removed.append(name)
                elif stat.S_ISDIR(info.st_mode) and not any(path.iterdir()):
                    path.rmdir()
                    removed.append(name)
        self._files -= set(removed)
        self._save()
        return removed

    def _deletable(self, name: str) -> bool:
        """A name of the command's pattern and of simcoll's own shape (no ``..``, no
        absolute path, one folder level at most)."""
        shape = name.removesuffix("/") if name.endswith("/") else name
        return _SAFE_NAME.fullmatch(shape) is not None and self._pattern.fullmatch(name) is not None

    # -- writing ---------------------------------------------------------------------------

    def reserve(self, name: str) -> Path:
        """The path of ``name`` in the folder, listed in the manifest before it is written.

        Refused: a name that exists but simcoll did not write (the user's), a name that
        is not one of the command's (:attr:`pattern`), a symlink.
        """
        if not self._deletable(name):
            raise ConfigError(
                f"simcoll does not write a file named {name!r}", source=str(self.path)
            )
        parent = name.rpartition("/")[0]
        if parent:
            self._reserve_folder(parent)
        path = self.path / name
        if not self.is_own(name) and (path.exists() or path.is_symlink()):
            raise ConfigError(
                f"holds {name}, which simcoll did not write; will not overwrite it (move it "
                "or choose another folder)",
                source=str(self.path),
            )
        check_output(path, mark=None if not self.is_own(name) else b"")
        if name not in self._files:
            self._files.add(name)
            self._save()
        return path

    def _reserve_folder(self, name: str) -> None:
        key = f"{name}/"
        path = self.path / name
        if not self._deletable(key):
            raise ConfigError(
                f"simcoll does not make a folder named {key!r}", source=str(self.path)
            )
        if key not in self._files:
            if path.exists() or path.is_symlink():
                raise ConfigError(
                    f"holds {name}/, which simcoll did not make; will not write into it (move "
                    "it or choose another folder)",
                    source=str(self.path),
                )
            self._files.add(key)
            self._save()
        if path.is_symlink() or not path.is_dir():
            try:
                path.mkdir()
            except OSError as error:
                raise ConfigError(f"cannot make {name}/: {error.strerror}",
                                  source=str(self.path)) from None  # fmt: skip

    def write_text(self, name: str, text: str) -> Path:
        """Write ``name`` whole (see :meth:`reserve`); return its path."""
        return write_output(self.reserve(name), text, mark=None, checked=True)

    @contextlib.contextmanager
    def appending(self, name: str) -> Iterator[IO[str]]:
        """``name`` opened for appending (created if missing), never through a symlink."""
        path = self.reserve(name)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o666)
        except OSError as error:
            reason = "is a symbolic link" if error.errno == errno.ELOOP else error.strerror
            raise ConfigError(f"cannot append to it: {reason}", source=str(path)) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ConfigError("is not a regular file", source=str(path))
        with os.fdopen(fd, "a", encoding="utf-8") as handle:
            yield handle

    # -- the manifest ----------------------------------------------------------------------

    def _read_manifest(self) -> set[str]:
        path = self.path / MANIFEST
        try:
            info = path.lstat()
        except FileNotFoundError:
            return set()
        source = str(path)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError("is not a regular file; simcoll's manifest is", source=source)
        try:
            data = json.loads(read_input_text(path))  # bounded, never a FIFO
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            data = None
        files = data.get("files") if isinstance(data, dict) else None
        if (
            not isinstance(data, dict)
            or data.get(_MANIFEST_KEY) != 1
            or not isinstance(files, list)
            or not all(isinstance(f, str) for f in files)
        ):
            raise ConfigError(
                "is not a manifest simcoll wrote; will not trust it (move it or choose "
                "another folder)",
                source=source,
            )
        return set(files)

    def _save(self) -> None:
        text = json.dumps({_MANIFEST_KEY: 1, "files": sorted(self._files)}, indent=1) + "\n"
        write_output(self.path / MANIFEST, text, mark=_MANIFEST_MARK)
