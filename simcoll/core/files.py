"""Files in and out: inputs read only from bounded regular files, outputs written whole.

Every file simcoll reads (topologies, scenarios, measurements, params, sidecars, what an
importer names) goes through :func:`read_input_bytes` or :func:`read_input_text`: a
FIFO, a device such as ``/dev/zero``, a directory or a file over
:data:`MAX_INPUT_BYTES` is refused in one line instead of hanging or filling memory.

Every single file simcoll writes goes through :func:`write_output` (or
:func:`check_output` first, then a writer callback): it is written beside its target
and renamed over it, so a reader sees the old file or the new one; a failure (a full
disk) removes the half-written file and names the target. The target must not be an
input of the same command, a symlink, a directory or a special file, and an existing
file is replaced only if it carries simcoll's own mark (:func:`is_marked`): what
simcoll did not write, it does not overwrite.

>>> import os, tempfile
>>> os.chdir(tempfile.mkdtemp())
>>> _ = Path("notes.txt").write_text("mine")
>>> write_output("notes.txt", b"simcoll's", mark=b"simcoll")
Traceback (most recent call last):
...
simcoll.core.errors.ConfigError: notes.txt: exists and was not written by simcoll; will \
not overwrite it (remove it or choose another name)
>>> write_output("new.txt", b"by simcoll", mark=b"simcoll").read_text()
'by simcoll'
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from pathlib import Path

from simcoll.core.errors import ConfigError

__all__ = [
    "MAX_INPUT_BYTES",
    "MAX_NESTING",
    "TOO_DEEP",
    "check_nesting",
    "check_output",
    "file_sha256",
    "is_marked",
    "read_input_bytes",
    "read_input_text",
    "record_read",
    "recording_reads",
    "same_file",
    "write_output",
]

#: The largest input file read (64 MiB: the largest shipped input is under 1 MiB).
MAX_INPUT_BYTES = 64 * 2**20
#: Bytes at the start of an existing output searched for simcoll's mark.
_MARK_WINDOW_BYTES = 64 * 2**10
#: How deeply TOML and JSON inputs may nest tables and lists (the deepest shipped file
#: nests 4 levels; Python's parsers and checkers recurse per level).
MAX_NESTING = 64


_READS: ContextVar[dict[str, str] | None] = ContextVar("_READS", default=None)


@contextlib.contextmanager
def recording_reads() -> Iterator[dict[str, str]]:
    """Inside the block, every input :func:`read_input_bytes` reads is recorded: its
    resolved path and the SHA-256 of the bytes read. A scenario point keeps what it read,
    so that a resumed point is taken only if every one of its inputs is unchanged.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "pl.txt"
    >>> _ = path.write_text("0 8")
    >>> with recording_reads() as reads:
    ...     _ = read_input_bytes(path)
    >>> reads == {str(path.resolve()): file_sha256(path)}
    True
    """
    reads: dict[str, str] = {}
    token = _READS.set(reads)
    try:
        yield reads
    finally:
        _READS.reset(token)


def record_read(reads: dict[str, str]) -> None:
    """Record files read earlier (a cache's, served again) as read now, where
    :func:`recording_reads` is recording."""
    current = _READS.get()
    if current is not None:
        current.update(reads)


def file_sha256(path: str | Path, *, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The SHA-256 of a file's bytes, or ``"unreadable: <why>"``.

    Bounded as :func:`read_input_bytes` is (a run's digest and its resume hash every file
    a scenario names): a FIFO, a device such as ``/dev/zero``, a directory or a file over
    ``max_bytes`` is never read; it hashes to why (reading it will refuse it in one line).

    >>> file_sha256("/dev/zero")
    'unreadable: is a device, not a regular file'
    """
    try:
        fd = _open_input(path, missing="no such file", max_bytes=max_bytes)
    except ConfigError as error:
        return f"unreadable: {error.message.removeprefix('cannot read: ')}"
    digest = hashlib.sha256()
    left = max_bytes + 1
    with os.fdopen(fd, "rb") as handle:
        try:
            while left > 0 and (block := handle.read(min(left, 2**20))):
                digest.update(block)
                left -= len(block)
        except OSError as error:
            return f"unreadable: {error.strerror}"
    if left <= 0:  # it grew past the cap while we read it
        return f"unreadable: {_too_big(max_bytes + 1, max_bytes)}"
    return digest.hexdigest()


def _open_input(path: str | Path, *, missing: str, max_bytes: int) -> int:
    """A descriptor on ``path`` if it is a regular file of at most ``max_bytes``, else a
    one-line ConfigError (``missing`` when it does not exist). Opened without blocking,
    so a FIFO is refused rather than waited on; the checks are on the open file, so what
    is read is what was checked."""
    source = str(path)
    if not source:
        raise ConfigError("an empty file name", source="''")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ConfigError(missing, source=source) from None
    except OSError as error:
        raise ConfigError(f"cannot read: {error.strerror}", source=source) from None
    except ValueError as error:  # a NUL in the name
        raise ConfigError(f"cannot read: {error}", source=source) from None
    info = os.fstat(fd)
    problem = None
    if stat.S_ISDIR(info.st_mode):
        problem = "is a directory, not a file"
    elif not stat.S_ISREG(info.st_mode):
        problem = f"is {_kind(info.st_mode)}, not a regular file"
    elif info.st_size > max_bytes:
        problem = _too_big(info.st_size, max_bytes)
    if problem is not None:
        os.close(fd)
        raise ConfigError(problem, source=source)
    return fd


def read_input_bytes(
    path: str | Path, *, missing: str = "no such file", max_bytes: int = MAX_INPUT_BYTES
) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; else one-line ConfigError.

    ``missing`` is the message when the file does not exist. The file is opened without
    blocking, so a FIFO is refused rather than waited on.
    """
    source = str(path)
    fd = _open_input(path, missing=missing, max_bytes=max_bytes)
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read(max_bytes + 1)
        except OSError as error:
            raise ConfigError(f"cannot read: {error.strerror}", source=source) from None
    if len(data) > max_bytes:  # it grew while we read it
        raise ConfigError(_too_big(len(data), max_bytes), source=source)
    reads = _READS.get()
    if reads is not None:
        reads[str(Path(path).resolve())] = hashlib.sha256(data).hexdigest()
    return data


def read_input_text(
    path: str | Path, *, missing: str = "no such file", max_bytes: int = MAX_INPUT_BYTES
) -> str:
    """:func:`read_input_bytes` decoded as UTF-8 (a leading byte-order mark dropped)."""
    data = read_input_bytes(path, missing=missing, max_bytes=max_bytes)
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise ConfigError(
            f"not a UTF-8 text file (byte 0x{data[error.start]:02x} at offset {error.start})",
            source=str(path),
            field=f"line {line}",
        ) from None


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a plain file"


def _too_big(size_bytes: int, max_bytes: int) -> str:
    return f"is {size_bytes} bytes, over the {max_bytes // 2**20} MiB limit of an input file"


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file (the same inode, or the same resolved path)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        try:
            return Path(a).resolve() == Path(b).resolve()
        except (OSError, ValueError, RuntimeError):
            return False


def is_marked(path: Path, mark: bytes) -> bool:
    """Whether the regular file ``path`` holds ``mark`` near its start (simcoll wrote it)."""
    try:
        with path.open("rb") as handle:
            return mark in handle.read(_MARK_WINDOW_BYTES)
    except OSError:
        return False


def check_output(
    path: str | Path,
    *,
    mark: bytes | None,
    inputs: Iterable[str | Path] = (),
    what: str = "",
) -> Path:
    """Refuse a target that simcoll may not write; return it as a Path.

    Refused: an empty name, a name that is one of ``inputs``, a symlink, a directory,
    a special file (``/dev/full``, a FIFO), a missing parent folder, and an existing
    file without ``mark`` (None: any existing file). ``what`` prefixes the source (a
    flag such as ``-o``).
    """
    text = str(path)
    label = f"{what} {text}".strip() if what else text
    if not text:
        raise ConfigError("an empty file name", field=what or None)
    out = Path(path)
    for item in inputs:
        if same_file(out, item):
            raise ConfigError(f"is an input of this command ({item}); will not overwrite it",
                              source=label)  # fmt: skip
    try:
        info = out.lstat()
    except FileNotFoundError:
        info = None
    except OSError as error:
        raise ConfigError(f"cannot write: {error.strerror}", source=label) from None
    if info is not None:
        if stat.S_ISLNK(info.st_mode):
            raise ConfigError("is a symbolic link; simcoll writes only plain files", source=label)
        if stat.S_ISDIR(info.st_mode):
            raise ConfigError("is a directory; give a file name", source=label)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"is {_kind(info.st_mode)}; simcoll writes only plain files",
                              source=label)  # fmt: skip
        if mark is None or not is_marked(out, mark):
            raise ConfigError(
                "exists and was not written by simcoll; will not overwrite it (remove it or "
                "choose another name)",
                source=label,
            )
    if not out.parent.is_dir():
        raise ConfigError(f"no such folder {out.parent}", source=label)
    return out


def write_output(
    path: str | Path,
    data: bytes | str | Callable[[Path], None],
    *,
    mark: bytes | None,
    inputs: Iterable[str | Path] = (),
    what: str = "",
    checked: bool = False,
) -> Path:
    """Write ``data`` (bytes, text, or a function that writes a given path) to ``path``
    atomically, after :func:`check_output` (skipped when ``checked``); return the path.

    The data goes to a hidden file beside the target, is flushed to disk and renamed
    over it. Any failure removes the hidden file and raises a one-line ConfigError
    naming the target (``cannot write: No space left on device``).
    """
    out = Path(path) if checked else check_output(path, mark=mark, inputs=inputs, what=what)
    label = f"{what} {out}".strip() if what else str(out)
    tmp: Path | None = None
    try:
        fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
        tmp = Path(name)
        with os.fdopen(fd, "wb") as handle:
            if not callable(data):
                handle.write(data.encode("utf-8") if isinstance(data, str) else data)
                handle.flush()
                os.fsync(handle.fileno())
        if callable(data):
            data(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, out)
    except OSError as error:
        _remove(tmp)
        raise ConfigError(f"cannot write: {error.strerror or error}", source=label) from None
    except BaseException:
        _remove(tmp)
        raise
    return out


def _remove(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


def _umask() -> int:
    """The process's umask (read by setting it, then putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_nesting(value: object, *, source: str, limit: int = MAX_NESTING) -> None:
    """Refuse data (parsed TOML or JSON) whose tables and lists nest deeper than ``limit``.

    Counted without recursion, so any depth is measured safely.

    >>> check_nesting({"a": [[1]]}, source="x.toml", limit=2)
    Traceback (most recent call last):
    ...
    simcoll.core.errors.ConfigError: x.toml: tables and lists nest more than 2 levels deep
    """
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[object]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth + 1 > limit:
            raise ConfigError(f"tables and lists nest more than {limit} levels deep",
                              source=source)  # fmt: skip
        stack.extend((child, depth + 1) for child in children)


#: The message for a parser's RecursionError on deeply nested input.
TOO_DEEP = f"tables and lists nest more than {MAX_NESTING} levels deep"
