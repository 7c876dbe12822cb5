"""Flat id-stream readers: a bare `.npy` id array, a text file of ids, DLRM's `trace.log`.

Each gives one table with one id per bag, cut into mini-batches of `batch_size` ids. Text is
parsed in bounded blocks by one compiled pass (no Python loop per id), and strictly: anything but
digits, separators and a leading minus is an error naming the line, so a float or a header
never turns silently into ids.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.traces._jit import njit
from scratchpipe_sim.traces.csr_trace import Trace
from scratchpipe_sim.traces.io import flat_trace, register_reader

#: bytes of text parsed at a time (the parsed ids are kept; the text is not).
TEXT_BLOCK_BYTES = 1 << 24

_SEPARATORS = b" \t\r\n,"
_ALLOWED = np.zeros(256, bool)
_ALLOWED[np.frombuffer(b"0123456789-" + _SEPARATORS, np.uint8)] = True


@register_reader("npy", suffixes=(".npy",), help="1-D integer numpy array of row ids")
def read_npy(path: Path, batch_size: int | None, num_rows: int | None) -> Trace:
    src = str(path)
    try:
        ids = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise UserError(f"not a readable .npy array ({e})", source=src) from None
    if ids.dtype.byteorder not in ("=", "|", "<"):
        ids = ids.astype(ids.dtype.newbyteorder("="))
    return flat_trace(ids, path, batch_size, num_rows, "npy")


def _sniff_text(path: Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(4096)
    if not head:
        return False
    return bool(_ALLOWED[np.frombuffer(head, np.uint8)].all())


def _sniff_log(path: Path) -> bool:  # registered before "text": it is the narrower test
    with open(path, "rb") as f:
        head = f.read(4096)
    return b"," in head and _sniff_text(path)


@register_reader("dlrm-log", suffixes=(".log",), sniff=_sniff_log,
                 help="DLRM trace.log: one line of ', '-separated row ids")
def read_dlrm_log(path: Path, batch_size: int | None, num_rows: int | None) -> Trace:
    return flat_trace(parse_id_text(path), path, batch_size, num_rows, "dlrm-log")


@register_reader("text", suffixes=(".txt", ".ids"), sniff=_sniff_text,
                 help="one row id per line (any whitespace or commas also separate ids)")
def read_text(path: Path, batch_size: int | None, num_rows: int | None) -> Trace:
    return flat_trace(parse_id_text(path), path, batch_size, num_rows, "text")


def parse_id_text(path: Path, block_bytes: int = TEXT_BLOCK_BYTES) -> np.ndarray:
    """All integer ids in a text file, separated by whitespace and/or commas (int64)."""
    src = str(path)
    parts: list[np.ndarray] = []
    carry = b""
    line = 1  # 1-based line number at the start of the current block
    try:
        f = open(path, "rb")
    except OSError as e:
        raise UserError(f"cannot read ({e.strerror})", source=src) from None
    with f:
        while True:
            data = f.read(block_bytes)
            block = carry + data
            if not block:
                break
            if data:  # keep a possibly cut last token for the next block
                cut = last_separator(block)
                block, carry = block[: cut + 1], block[cut + 1 :]
            else:
                carry = b""
            if block:
                parts.append(parse_block(block, src, line))
                line += block.count(b"\n")
            if not data:
                break
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def last_separator(block: bytes) -> int:
    """Index of the last separator byte in `block` (-1 when none)."""
    return max(block.rfind(bytes([c])) for c in _SEPARATORS)


def parse_block(block: bytes, src: str, first_line: int) -> np.ndarray:
    """Integer ids of a text block that ends on a separator (UserError naming the line)."""
    ids, n, err, kind = _parse_ids(np.frombuffer(block, np.uint8))
    if err >= 0:
        ln = first_line + block.count(b"\n", 0, err)
        if kind == 0:
            ch = block[err : err + 1].decode("latin-1")
            raise UserError(f"line {ln}: unexpected character {ch!r}: expected integer row "
                            "ids separated by whitespace or commas", source=src)
        what = "malformed number" if kind == 1 else "number too large for int64"
        raise UserError(f"line {ln}: {what}: expected integer row ids", source=src)
    return ids[:n].copy()  # do not pin the worst-case buffer


# the names other reader modules import
_parse_block = parse_block
_last_separator = last_separator


@njit(cache=True)
def _parse_ids(raw):
    """One pass over the bytes: ids, their count, and the first error (position, kind:
    0 bad character, 1 misplaced minus, 2 overflow)."""
    out = np.empty(len(raw) // 2 + 1, np.int64)
    n = 0
    val = 0
    neg = False
    in_tok = False
    limit = (2**63 - 1 - 9) // 10
    for i in range(len(raw)):
        c = raw[i]
        if 48 <= c <= 57:
            if val > limit:
                return out, n, i, 2
            val = val * 10 + (c - 48)
            in_tok = True
        elif c == 45:  # '-': only first in a token
            if in_tok or neg:
                return out, n, i, 1
            neg = True
        elif c == 32 or c == 10 or c == 9 or c == 13 or c == 44:
            if in_tok:
                out[n] = -val if neg else val
                n += 1
            elif neg:
                return out, n, i, 1
            val = 0
            neg = False
            in_tok = False
        else:
            return out, n, i, 0
    if in_tok:
        out[n] = -val if neg else val
        n += 1
    elif neg:
        return out, n, len(raw) - 1, 1
    return out, n, -1, 0
