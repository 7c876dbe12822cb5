"""Writing a measured hardware preset, shared by `calibrate` and `calibrate --cpu`."""

from __future__ import annotations

import os
from pathlib import Path

from scratchpipe_sim.errors import UserError


def write_preset(path: Path, text: str) -> None:
    """Write atomically (a temp file renamed into place); a folder that cannot be created or
    written is one UserError line (calibrate --cpu and the GPU calibrate share this)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as e:
        if tmp.parent.is_dir():
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
        raise UserError(f"cannot write the preset: {e.strerror or e}; expected a writable "
                        "folder (--out)", source=str(path)) from None


def check_writable(path: Path) -> None:
    """Fail before measuring (minutes) when `path`'s folder cannot be written."""
    folder = path.parent
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"cannot write into {folder}: expected a writable folder (--out)",
                        source=str(path))
