"""Files written whole: a process killed while writing leaves each file as it was before."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path


def read_document(path: str | os.PathLike[str]) -> str:
    """A document file's text as written: UTF-8, an editor's byte-order mark dropped (no part of
    the text), line ends kept. Text mode made CR LF and CR into LF, so a document read from a
    file reached the model otherwise than the same text sent inline or over HTTP."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return handle.read()


def write_whole(files: Mapping[Path, str]) -> None:
    """Write each ``path: text`` (UTF-8) to ``NAME.part`` beside it, then rename every part over
    its file (POSIX rename is atomic): a kill meanwhile leaves each file whole, old or new, never
    torn or empty. All parts are written before the first rename, so files that belong together
    (a summary's JSON and Markdown) change within a moment of each other."""
    parts = [(path, path.with_name(path.name + ".part")) for path in files]
    try:
        for path, part in parts:
            part.write_text(files[path], encoding="utf-8")
    except BaseException:  # a full disk, a Ctrl-C: the old files stay, and no part beside them
        for _, part in parts:
            with contextlib.suppress(OSError):
                part.unlink(missing_ok=True)
        raise
    for path, part in parts:
        os.replace(part, path)


def fsync_file(path: Path) -> None:
    """Flush a file's data to the disk (before a rename publishes it: after a power loss a
    renamed file not flushed may be empty)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    """Flush a directory's entries (renames, new files) to the disk, where the file system
    allows it: some (network and FUSE ones) cannot open a directory to fsync it or refuse the
    fsync (EINVAL, EBADF), and what was written and flushed is not to fail over it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
