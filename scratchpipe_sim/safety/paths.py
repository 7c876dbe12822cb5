"""What a path given on the command line or in a config is, checked once where input enters
and output leaves.

Why: a FIFO given as a trace hangs (the file is sniffed, then opened again), a device reads
forever, a folder given as a CSV ends in IsADirectoryError, a symlink loop reads as "no such
file", and a name too long or holding a NUL byte ends in an OSError traceback. `input_kind`
refuses what is not a regular file (or a folder, where one is expected) before anything is
opened; `output_error` turns the OSError of a write into one line naming the path.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Literal

from scratchpipe_sim.errors import UserError, os_reason


def _a(what: str) -> str:
    return f"an {what}" if what[:1] in "aeiou" else f"a {what}"

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def input_kind(path: str | os.PathLike, what: str = "file",
               field: str | None = None) -> Literal["file", "folder"]:
    """'file' or 'folder' for an existing regular file or folder (symlinks followed); a
    UserError naming the path for anything else: missing, a symlink loop, unreadable, a
    FIFO, a device or a socket (read once they could hang or never end)."""
    src = str(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        msg = (f"a broken symlink: expected {_a(what)}" if os.path.islink(path)
               else f"no such {what}")
        raise UserError(msg, source=src, field=field) from None
    except ValueError:  # an embedded NUL byte
        raise UserError(f"not a valid path (it holds a NUL byte); expected {_a(what)}",
                        source=src.replace("\0", "\\0"), field=field) from None
    except OSError as e:
        reason = "a symlink loop" if e.errno == errno.ELOOP else os_reason(e)
        raise UserError(f"cannot read ({reason}); expected {_a(what)}", source=src,
                        field=field) from None
    if stat.S_ISREG(st.st_mode):
        return "file"
    if stat.S_ISDIR(st.st_mode):
        return "folder"
    kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
    raise UserError(f"{kind}, not a regular file: expected {_a(what)} (input is read more "
                    "than once; copy a stream to a file first)", source=src, field=field)


def input_file(path: str | os.PathLike, what: str = "file", field: str | None = None) -> Path:
    """`path` when it is a regular file; a one-line UserError otherwise (a folder too)."""
    if input_kind(path, what, field) == "folder":
        raise UserError(f"a folder: expected {_a(what)}", source=str(path), field=field)
    return Path(path)


def present(path: str | os.PathLike, what: str = "file", field: str | None = None) -> bool:
    """For lookups that try several places (presets, includes): False when nothing at all
    is at `path`, True for a regular file or folder, a UserError (`input_kind`'s) for
    what is there but cannot be input -- a symlink loop is never reported as missing."""
    try:
        if not os.path.lexists(path):
            return False
    except ValueError:  # a NUL byte: input_kind says so
        pass
    input_kind(path, what, field)
    return True


#: the errors of a write that found no room: disk full, quota exceeded, file too large
FULL_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def os_error(e: OSError) -> UserError:
    """The one-line error for an OSError on a named path that no caller handled (a name too
    long, a read-only file system, a full disk, ...): the CLI's last word before a
    traceback, so no write path can end in one."""
    if e.errno == errno.ENAMETOOLONG:
        reason = "a name in the path is too long (most file systems allow 255 bytes)"
    elif e.errno == errno.ELOOP:
        reason = "a symlink loop"
    else:
        reason = os_reason(e)
    where = e.filename if e.filename2 is None else e.filename2
    if e.errno in FULL_DISK_ERRNOS:
        reason += "; nothing half-written was kept: free some space or write elsewhere"
    if where is None:
        return UserError(f"cannot write: {reason}")
    return UserError(f"cannot read or write this path: {reason}", source=short_path(where))


def short_path(path: object) -> str:
    """A path for a one-line message: NUL bytes shown as \\0, a very long one shortened."""
    src = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
    src = src.replace("\0", "\\0")
    return src if len(src) <= 200 else src[:100] + "..." + src[-60:]


#: the longest name a results folder or file may take (bytes; most filesystems: 255)
NAME_MAX_BYTES = 255


def plain_name(name: object, source: str | None, field: str, what: str = "name") -> str:
    """`name` when it is one plain path component (it names a folder or file under a
    results folder); else a UserError. Why: experiment and config files are shared between
    people, and a name such as `../../x` or `/abs/x` would write outside `results/`."""
    if not isinstance(name, str) or not name:
        raise UserError(f"expected a non-empty string (it names a results folder), got "
                        f"{name!r}", source=source, field=field)
    bad = next((c for c in name if c in "/\\" or ord(c) < 32 or ord(c) == 127), None)
    if bad == "\0":
        raise UserError(f"expected a {what} without NUL bytes, got {short_path(name)!r}",
                        source=source, field=field)
    if bad is not None or name in (".", "..") or name.startswith("-"):
        shown = repr(bad) if bad is not None else repr(name)
        raise UserError(f"expected a plain {what} (letters, digits, '.', '-', '_'; no path "
                        f"separators, control characters, '.' or '..', no leading '-'): "
                        f"{shown} in {name!r}", source=source, field=field)
    if len(name.encode("utf-8", "surrogatepass")) > NAME_MAX_BYTES:
        raise UserError(f"expected a {what} of at most {NAME_MAX_BYTES} bytes, got "
                        f"{len(name.encode('utf-8', 'surrogatepass'))}", source=source,
                        field=field)
    return name
