"""Small synthetic Criteo day files the trace and reliability tests write (issue 41)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np


def day_lines(n: int, seed: int, vocab: int = 50) -> list[str]:
    """`n` Criteo lines: label, 13 integers, 26 hex categoricals (some fields empty; a
    small vocabulary per column so values repeat, as in a real day)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ints = ["" if rng.random() < 0.1 else str(int(rng.integers(-2, 900)))
                for _ in range(13)]
        cats = ["" if rng.random() < 0.08 else
                f"{int(rng.integers(0, vocab)) * 0x9E3779B1 % 2**32:08x}" for _ in range(26)]
        out.append("\t".join([str(int(rng.integers(0, 2))), *ints, *cats]))
    return out


def write_day(path: Path, lines: list[str], gz: bool = False) -> Path:
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path
