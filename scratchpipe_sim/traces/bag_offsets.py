"""Bag offsets computed from a compact on-disk encoding, indexed like a 1-D int64 array.

Why: a `.sptrace` of version 1 stored one int64 offset per bag, twice the bytes of the ids
at pooling 1 (uint32 ids): a Criteo-Terabyte day (~4.7 B lookups) needed ~57 GB, 38 GB of
it offsets. Version 2 stores them as one of

* `constant` — every bag holds `bag_length` ids: no file at all (`offsets[i] = i * L`);
* `u32-marks` — `offsets_u32.bin`, each offset minus the offset at the start of its block of
  `MARK_BAGS` bags (uint32), and `offset_marks.bin`, those block-start offsets (int64, one
  per block): 4 bytes a bag, random access without a prefix sum.

`BagOffsets` reads either as the int64 offsets `Trace` expects: an int gives a number, a
slice a lazy view (nothing is computed until `np.asarray` or an int index asks: a trace's
timed slice of a billion bags costs no memory), an integer array the gathered values.
Every value is the one version 1 stored, so a trace's content digest and fingerprint (and
with them the replay cache's keys) do not depend on the encoding.
"""

from __future__ import annotations

import numpy as np

from scratchpipe_sim.traces._pages import release

#: log2 of the bags a `u32-marks` block holds: a block spans fewer than 2^32 ids unless its
#: bags average over 65,536 ids each
MARK_SHIFT = 16
MARK_BAGS = 1 << MARK_SHIFT
#: the encodings `BagOffsets` reads (manifest.json's `offsets.encoding`)
ENCODINGS = ("constant", "u32-marks")
_INT64 = np.dtype(np.int64)


class BagOffsets:
    """Entries `start .. start+length-1` of a trace's encoded offsets, minus `shift`.

    `bag_length` for the constant encoding; `rel` (uint32, one per offset) and `marks`
    (int64, one per block) for u32-marks. Read only; pickles with its arrays."""

    ndim = 1
    dtype = _INT64
    itemsize = 8

    def __init__(self, length: int, bag_length: int | None = None,
                 rel: np.ndarray | None = None, marks: np.ndarray | None = None,
                 start: int = 0, shift: int = 0):
        if (bag_length is None) == (rel is None):
            raise ValueError("BagOffsets needs a bag length or relative offsets")
        self._n = int(length)
        self.bag_length = None if bag_length is None else int(bag_length)
        self.rel = rel
        self.marks = marks
        self.start = int(start)
        self.shift = int(shift)

    # -- array protocol -----------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    @property
    def shape(self) -> tuple[int]:
        return (self._n,)

    @property
    def size(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        return 8 * self._n

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self._values(self.start, self.start + self._n)
        return out if dtype is None else out.astype(dtype, copy=False)

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            i = int(key)
            if i < 0:
                i += self._n
            if not 0 <= i < self._n:
                raise IndexError(f"index {int(key)} out of range for {self._n} offsets")
            return np.int64(self._values(self.start + i, self.start + i + 1)[0])
        if isinstance(key, slice):
            lo, hi, step = key.indices(self._n)
            if step != 1:
                return np.asarray(self)[key]
            hi = max(hi, lo)
            return BagOffsets(hi - lo, self.bag_length, self.rel, self.marks,
                              self.start + lo, self.shift)
        idx = np.asarray(key)
        if idx.dtype == bool or not np.issubdtype(idx.dtype, np.integer):
            return np.asarray(self)[key]
        idx = idx.astype(np.int64, copy=False)
        if idx.size and (idx.min() < -self._n or idx.max() >= self._n):
            raise IndexError(f"an index out of range for {self._n} offsets")
        return self._gather(np.where(idx < 0, idx + self._n, idx) + self.start)

    def shifted(self, base: int) -> BagOffsets:
        """These offsets minus `base` (a slice's rebased offsets), lazily."""
        return BagOffsets(self._n, self.bag_length, self.rel, self.marks, self.start,
                          self.shift + int(base))

    def release_pages(self, lo: int, hi: int) -> None:
        """Hand back the mapped pages of entries lo..hi-1 (`_pages.release`)."""
        if self.rel is not None:
            release(self.rel, self.start + int(lo), self.start + int(hi))

    def __repr__(self) -> str:
        how = (f"bag_length={self.bag_length}" if self.bag_length is not None
               else "u32-marks")
        return f"BagOffsets({self._n} offsets, {how})"

    # -- values ---------------------------------------------------------------------------
    def _values(self, lo: int, hi: int) -> np.ndarray:
        """Underlying entries lo..hi-1 minus the shift, int64."""
        if self.bag_length is not None:
            return np.arange(lo, hi, dtype=np.int64) * self.bag_length - self.shift
        out = np.asarray(self.rel[lo:hi], np.int64)
        blocks = np.arange(lo, hi, dtype=np.int64) >> MARK_SHIFT
        out += np.asarray(self.marks, np.int64)[blocks]
        if self.shift:
            out -= self.shift
        return out

    def _gather(self, entries: np.ndarray) -> np.ndarray:
        if self.bag_length is not None:
            return entries * self.bag_length - self.shift
        out = np.asarray(self.rel[entries], np.int64)
        out += np.asarray(self.marks, np.int64)[entries >> MARK_SHIFT]
        return out - self.shift


def encode_u32(offsets: np.ndarray, first_entry: int, marks: list[int]) -> np.ndarray:
    """The uint32 relative offsets of global offset entries `first_entry ..` (int64 values
    `offsets`), appending to `marks` the offset at every block start among them (the marks
    of earlier blocks must be there already). ValueError when a block spans 2^32 ids."""
    offsets = np.asarray(offsets, np.int64)
    entries = np.arange(first_entry, first_entry + len(offsets), dtype=np.int64)
    starts = (entries & (MARK_BAGS - 1)) == 0
    marks.extend(int(v) for v in offsets[starts])
    rel = offsets - np.asarray(marks, np.int64)[entries >> MARK_SHIFT]
    if len(rel) and int(rel.max()) >= 1 << 32:
        raise ValueError(f"a block of {MARK_BAGS} bags holds 2^32 ids or more: not "
                         "encodable as u32-marks")
    return rel.astype("<u4")
