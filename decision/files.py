"""Files written whole: a process killed while writing leaves each file as it was before."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path


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
