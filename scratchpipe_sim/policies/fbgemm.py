"""FBGEMM TBE `MANAGED_CACHING`: a set-associative embedding cache with per-batch state.

Why a policy of its own: FBGEMM's cache is not a textbook LRU/LFU. It works on whole
mini-batches: every resident row of batch t is stamped t first, then each missing row takes
a way of its set that batch t does not use (a row needed by the current batch is never
evicted). When every way of the set is used by batch t the row is a *conflict miss*: it is
served from host memory (UVM) and not cached (`UNPLACED`). Every eviction writes the row back.

Kernel shape (why it is fast enough): a one-byte tag per way (hash bits the set index does
not use) is compared 8 ways at a time and the matches gathered into one bit mask (the
lowest candidate way by count-trailing-zeros, no branch per word), so finding a row reads
one line of tags and `slot_row` only where a tag matches; a batch's missing accesses are
radix-sorted once by (row, stream position), which gives both FBGEMM's insertion order and
every row's accesses together, so each missing row is placed once and its outcomes follow
(no second lookup per access). The lines an access will touch are prefetched while earlier
accesses are served (the set's tags 16 accesses ahead, then the matching way or the victim
scan's lines 6 ahead), per-slot arrays start on a cache line, and the per-access helpers
are inlined.

Geometry: `sets = ceil(capacity / ways)`, so the effective capacity is `sets * ways` (reported
as the policy's capacity). Set index = MurmurHash3 fmix64(linearized row id) mod sets.

`fbgemm-lfu` keeps a global access count per row (O(rows) memory, as FBGEMM does; int32
until 2^31 accesses), counts the whole batch before placing any row (`lfu_update_counts`),
and admits a missing row only if its count beats the least-frequent evictable way of its set
(empty ways always admit).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from scratchpipe_sim.errors import UserError
from scratchpipe_sim.policies.base import (
    EVICTIONS,
    FILLS,
    HIT,
    MISS,
    POLICIES,
    UNPLACED,
    WRITEBACKS,
    Policy,
)
from scratchpipe_sim.traces._jit import njit, on_numba
from scratchpipe_sim.traces._prefetch import prefetch
from scratchpipe_sim.traces.csr_trace import Chunk

_C1 = np.uint64(0xFF51AFD7ED558CCD)
_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
EMPTY = -1


@njit(cache=True)
def fmix64(key):
    """MurmurHash3's 64-bit finalizer (FBGEMM's cache-set hash), wrapping mod 2^64."""
    k = np.uint64(key)
    k ^= k >> _S33
    k *= _C1
    k ^= k >> _S33
    k *= _C2
    k ^= k >> _S33
    return k


@njit(cache=True)
def cache_set(row, sets):
    """Set index of a linearized row id."""
    return np.int64(fmix64(row) % np.uint64(sets))


@njit(cache=True)
def _tag(h):
    """A one-byte fingerprint of a row from hash bits the set index does not use (0 = empty)."""
    t = np.uint8(h >> np.uint64(56))
    return t if t != 0 else np.uint8(1)


_LOCKED = np.iinfo(np.int64).max
_LO = np.uint64(0x0101010101010101)
_HI = np.uint64(0x8080808080808080)


# Helpers called per access or per miss are inlined into the kernel (`inline="always"`): a
# compiled call that takes arrays increments and decrements each array's reference count
# (atomic operations), which cost more than the lookup itself (measured: -25 to -30% time).
# Even inlined, a helper with a loop kept those counts (Numba's pruning missed them: ~9 per
# miss for the admission, counted with a gdb breakpoint on NRT_incref), so the admission is
# written out in `_fbgemm_chunk`; check a new per-access helper the same way.


@njit(cache=True, inline="always")
def _find(slot_row, tags, tags64, base, ways, r, tag):
    """Way of row r in the set at `base`, or -1, for any geometry: compares the set's
    one-byte tags eight at a time (SWAR zero-byte test) when `ways` is a multiple of 8, and
    reads `slot_row` only where a tag matches. (The kernel uses `_tag_mask` when ways is a
    multiple of 8 up to 64.)"""
    if ways & 7 == 0:
        pat = np.uint64(tag) * _LO
        w0 = base >> 3
        for q in range(ways >> 3):
            x = tags64[w0 + q] ^ pat
            if (x - _LO) & ~x & _HI:
                k0 = (w0 + q) << 3
                for k in range(k0, k0 + 8):
                    if tags[k] == tag and slot_row[k] == r:
                        return k
        return -1
    for w in range(ways):
        if tags[base + w] == tag and slot_row[base + w] == r:
            return base + w
    return -1


#: prefetch distances in accesses (see _prefetch.py): the set's tags (and for LFU the row's
#: count) of access j + _PF_FAR, then, from the tags by then in cache, the lines serving
#: access j + _PF_NEAR will touch (the matching way, or the set a victim scan reads)
_PF_FAR, _PF_NEAR = 16, 6
_RING = 31  # set keys kept for accesses j .. j + _PF_FAR (a power of two minus one)
_BASE_MASK = (np.int64(1) << 56) - 1
_GATHER = np.uint64(0x0102040810204080)  # moves bit 8i of a word to bit 56 + i


@njit(cache=True)
def _set_key(r, usets, ways):
    """First slot of row r's set, with r's tag in the top byte: one hash and one modulo per
    access, kept in a ring from its prefetch until the access is served."""
    h = fmix64(r)
    return (np.int64(h % usets) * ways) | (np.int64(_tag(h)) << 56)


@njit(cache=True)
def _key_tag(key):
    return np.uint8((key >> 56) & 255)


def trailing_zeros(x: Any) -> int:
    """Trailing zero bits of `x`, its bit width when `x` is 0 (LLVM's `cttz`). This body runs
    only in pure Python (`NUMBA_DISABLE_JIT=1`); compiled kernels get the intrinsic."""
    v = int(x)
    if v == 0:
        return 8 * np.dtype(type(x)).itemsize if isinstance(x, np.integer) else 64
    return (v & -v).bit_length() - 1


@on_numba
def _register() -> None:
    """The compiled `trailing_zeros`: LLVM's `cttz` (registered when Numba is imported,
    before any kernel compiles: a fully cached run imports no Numba)."""
    from numba import types
    from numba.cpython.unsafe.numbers import trailing_zeros as _llvm_cttz
    from numba.extending import overload

    @overload(trailing_zeros, inline="always")
    def _trailing_zeros_compiled(x):
        if isinstance(x, types.Integer):
            def impl(x):
                return _llvm_cttz(x)
            return impl
        return None


@njit(cache=True, inline="always")
def _tag_mask(tags64, base, ways, tag, sentinel):
    """Bit w set when way w's tag may equal `tag` (every true match is set; a false one only
    above a true one of its 8-way word), or'ed with `sentinel` (bit `ways`, so the lowest
    set bit is `ways` when nothing matches). Branch free: 8 ways a 64-bit word (SWAR
    zero-byte test), each word's 8 flags gathered into 8 bits by one multiply. Needs
    ways % 8 == 0 and ways <= 64."""
    pat = np.uint64(tag) * _LO
    w0 = base >> 3
    m = sentinel
    for q in range(ways >> 3):
        x = tags64[w0 + q] ^ pat
        flags = ((x - _LO) & ~x & _HI) >> np.uint64(7)
        m |= ((flags * _GATHER) >> np.uint64(56)) << np.uint64(8 * q)
    return m


@njit(cache=True, inline="always")
def _prefetch_scan(base, ways, lfu, slot_row, slot_ts, slot_cnt):
    """Hints for a victim scan of the set at `base`: its stamps, rows and LFU's counts."""
    prefetch(slot_ts, base)
    prefetch(slot_ts, base + ways - 1)
    for w in range(0, ways, 8):
        prefetch(slot_row, base + w)
    if lfu:  # int32 counts: 16 a line (int64 after `_widen`: 8)
        for w in range(0, ways, 64 // slot_cnt.itemsize):
            prefetch(slot_cnt, base + w)
        prefetch(slot_cnt, base + ways - 1)


@njit(cache=True)
def _fbgemm_chunk(ids, batch_ptr, first_batch, sets, ways, lfu, row_bits, slot_row, tags,
                  tags64, slot_ts, counts, slot_cnt, outcome, events):
    longest = 0
    for b in range(len(batch_ptr) - 1):
        longest = max(longest, batch_ptr[b + 1] - batch_ptr[b])
    # per-batch scratch, sized by the longest batch (not the chunk)
    set_of = np.empty(longest, np.int64)
    miss_idx = np.empty(longest, np.int64)
    keys = np.empty(longest, np.int64)
    miss_order = np.empty(longest, np.int64)
    sort_tmp = np.empty(longest, np.int64)
    sort_cnt = np.empty(256, np.int64)
    idx_bits = 1
    while (1 << idx_bits) < longest:
        idx_bits += 1
    packed = row_bits + idx_bits <= 62  # (row, miss index) fits one int64 sort key
    usets = np.uint64(sets)
    wbits = 1
    while (1 << wbits) < ways:
        wbits += 1
    wmask = (np.int64(1) << wbits) - 1
    swar = ways & 7 == 0 and ways <= 64  # `_tag_mask` applies
    sentinel = np.uint64(1) << np.uint64(ways) if swar and ways < 64 else np.uint64(0)
    n = len(ids)
    ring = np.empty(_RING + 1, np.int64)  # _set_key of accesses j .. j + _PF_FAR
    for j in range(min(n, _PF_FAR)):
        ring[j] = _set_key(ids[j], usets, ways)
    for b in range(len(batch_ptr) - 1):
        t = first_batch + b
        lo, hi = batch_ptr[b], batch_ptr[b + 1]
        # 1) every resident row of the batch is a hit and is stamped t (locked for batch t).
        #    LFU counts the batch's accesses here too: FBGEMM counts the whole batch before
        #    placing, and so does this (placement is step 2; a hit's `slot_cnt` is written
        #    again by the row's later hits in the batch, so it ends at the batch's count).
        nmiss = 0
        for j in range(lo, hi):
            # hints (see _prefetch.py), never a result. Access j + FAR: its set key into the
            # ring, its set's tags (LFU: its count). Access j + NEAR, whose tags are cached
            # by now: the row and stamp of the way its tag matches, or when none does (a
            # likely miss) the set's stamps (LFU: counts), which a victim scan reads.
            jf = j + _PF_FAR
            if jf < n:
                kf = _set_key(ids[jf], usets, ways)
                ring[jf & _RING] = kf
                prefetch(tags, kf & _BASE_MASK)
                if lfu:
                    prefetch(counts, ids[jf])
            if swar and j + _PF_NEAR < n:
                kn = ring[(j + _PF_NEAR) & _RING]
                bn = kn & _BASE_MASK
                w = np.int64(trailing_zeros(_tag_mask(tags64, bn, ways, _key_tag(kn),
                                                      sentinel)))
                if w < ways:
                    prefetch(slot_row, bn + w)
                    prefetch(slot_ts, bn + w)
                    if lfu:
                        prefetch(slot_cnt, bn + w)
                else:
                    _prefetch_scan(bn, ways, lfu, slot_row, slot_ts, slot_cnt)
            r = ids[j]
            if lfu:
                counts[r] += 1
            key = ring[j & _RING]
            base = key & _BASE_MASK
            tag = _key_tag(key)
            if swar:  # lowest candidate way first; a tag that is not r's is ~3% a word
                tm = _tag_mask(tags64, base, ways, tag, sentinel)
                w = np.int64(trailing_zeros(tm))
                while w < ways and slot_row[base + w] != r:
                    tm &= tm - np.uint64(1)
                    w = np.int64(trailing_zeros(tm))
                f = base + w if w < ways else -1
            else:
                f = _find(slot_row, tags, tags64, base, ways, r, tag)
            if f >= 0:
                slot_ts[f] = t
                if lfu:  # a resident row's count changes only in batches that hit it
                    slot_cnt[f] = counts[r]
                outcome[j] = HIT
            else:
                set_of[nmiss] = base
                miss_idx[nmiss] = j
                keys[nmiss] = (r << idx_bits) | nmiss if packed else r
                nmiss += 1
        if nmiss == 0:
            continue
        # 2) missing accesses sorted by (row, stream order): unique rows in ascending id
        #    order, which is FBGEMM's (sets are independent, ascending id inside a set), and
        #    each row's accesses together, so its outcomes follow from its one placement
        #    (first access MISS, later HIT; all UNPLACED when not placed).
        #    A single miss (every miss at batch size 1) needs no sort.
        #    `keys` ends as the order: packed keys (miss index in the low bits), or miss
        #    indices. (No array alias such as `order = keys`, and the admission written out
        #    here, not in an inlined helper: Numba kept an NRT incref/decref per aliased or
        #    passed array on every miss, ~9 a miss, counted with a gdb breakpoint.)
        if packed:
            if nmiss > 1:
                _radix_sort(keys[:nmiss], sort_tmp, sort_cnt, row_bits + idx_bits)
        else:  # ids too large to pack: sort miss indices by (row, index)
            for m in range(nmiss):
                miss_order[m] = m
            if nmiss > 1:
                _heapsort_by_row(miss_order[:nmiss], keys)
            for m in range(nmiss):
                keys[m] = miss_order[m]
        mask = (np.int64(1) << idx_bits) - 1 if packed else _LOCKED
        g = 0
        while g < nmiss:
            if g + _PF_NEAR < nmiss:  # a hint: the set of a later victim scan
                _prefetch_scan(set_of[keys[g + _PF_NEAR] & mask], ways, lfu, slot_row,
                               slot_ts, slot_cnt)
            m = keys[g] & mask
            r = ids[miss_idx[m]]
            # admission: FBGEMM's victim in the row's set for batch t, or none when every
            # way is used by batch t. LRU: the oldest stamp (empty ways carry -1), as a min
            # of keys (stamp + 1) << wbits | way (locked ways are _LOCKED, equal stamps go to
            # the lowest way): a plain min reduction, which the compiler vectorizes. LFU: the
            # least frequent way, empty ways count -1 and always admit (branch free; strict <
            # keeps the lowest way), and a row is admitted only if more frequent than it.
            base = set_of[m]
            if lfu:
                best = -1
                best_c = _LOCKED
                for w in range(ways):
                    k = base + w
                    c = _LOCKED if slot_ts[k] == t else np.int64(slot_cnt[k])
                    better = c < best_c
                    best = k if better else best
                    best_c = c if better else best_c
            else:
                low = _LOCKED
                for w in range(ways):
                    ts = np.int64(slot_ts[base + w])
                    low = min(low, _LOCKED if ts == t else ((ts + 1) << wbits) | w)
                best = -1 if low == _LOCKED else base + (low & wmask)
                best_c = low
            placed = best >= 0
            if placed and lfu and best_c >= 0 and counts[r] <= best_c:
                placed = False  # not admitted (best_c -1: an empty way, which always admits)
            if placed:
                if slot_row[best] != EMPTY:
                    events[b, EVICTIONS] += 1
                    events[b, WRITEBACKS] += 1
                slot_row[best] = r
                slot_ts[best] = t
                events[b, FILLS] += 1
                tags[best] = _tag(fmix64(r))
                if lfu:
                    slot_cnt[best] = counts[r]
            outcome[miss_idx[m]] = MISS if placed else UNPLACED
            g += 1
            while g < nmiss:
                m2 = keys[g] & mask
                if ids[miss_idx[m2]] != r:
                    break
                outcome[miss_idx[m2]] = HIT if placed else UNPLACED
                g += 1


@njit(cache=True)
def _radix_sort(a, tmp, cnt, bits):
    """Sort non-negative int64 keys below 2^bits: LSD radix, 8 bits a pass, skipping digits
    every key shares; insertion sort up to 32 keys. Why not `ndarray.sort`: on the ~1500
    misses of a batch it is 1.4x faster. Plain loops only (array slicing and swapping array
    variables made this small function take 4 s to compile)."""
    n = len(a)
    if n <= 32:  # a few keys (small batches): no counting passes
        for i in range(1, n):
            x = a[i]
            k = i - 1
            while k >= 0 and a[k] > x:
                a[k + 1] = a[k]
                k -= 1
            a[k + 1] = x
        return
    in_tmp = False  # whether the keys currently sit in tmp
    shift = 0
    while shift < bits:
        if in_tmp:
            in_tmp = not _radix_pass(tmp, a, n, shift, cnt)
        else:
            in_tmp = _radix_pass(a, tmp, n, shift, cnt)
        shift += 8
    if in_tmp:
        for i in range(n):
            a[i] = tmp[i]


@njit(cache=True)
def _radix_pass(src, dst, n, shift, cnt):
    """Stable counting pass on one 8-bit digit from src into dst; False (nothing moved) when
    every key has the same digit."""
    for d in range(256):
        cnt[d] = 0
    for i in range(n):
        cnt[(src[i] >> shift) & 255] += 1
    if cnt[(src[0] >> shift) & 255] == n:
        return False
    total = 0
    for d in range(256):
        c = cnt[d]
        cnt[d] = total
        total += c
    for i in range(n):
        d = (src[i] >> shift) & 255
        dst[cnt[d]] = src[i]
        cnt[d] += 1
    return True


@njit(cache=True)
def _before(rows, a, b):
    return rows[a] < rows[b] or (rows[a] == rows[b] and a < b)


@njit(cache=True)
def _heapsort_by_row(order, rows):
    """Sort miss indices by (rows[m], m): a total order, so an unstable sort is enough (and
    compiles in a fraction of numba's mergesort argsort)."""
    n = len(order)
    for start in range(n // 2 - 1, -1, -1):
        _sift(order, rows, start, n)
    for end in range(n - 1, 0, -1):
        order[0], order[end] = order[end], order[0]
        _sift(order, rows, 0, end)


@njit(cache=True)
def _sift(order, rows, i, n):
    while True:
        c = 2 * i + 1
        if c >= n:
            return
        if c + 1 < n and _before(rows, order[c], order[c + 1]):
            c += 1
        if not _before(rows, order[i], order[c]):
            return
        order[i], order[c] = order[c], order[i]
        i = c


_ALIGN = 64  # bytes: a cache line
_INT32_MAX = np.iinfo(np.int32).max


def _aligned(n: int, dtype: Any, fill: int) -> np.ndarray:
    """A 1-D array of n `fill`s whose data starts on a cache line. Why: numpy's large
    allocations start 16 bytes into a page, so a 32-way set's int32 stamps (128 bytes) would
    span three lines instead of two, and half the sets' 32 tags would straddle two."""
    item = np.dtype(dtype).itemsize
    raw = np.empty(n * item + _ALIGN, np.uint8)
    off = -raw.ctypes.data % _ALIGN
    a = raw[off : off + n * item].view(dtype)
    a.fill(fill)
    return a


@dataclass(frozen=True)
class FbgemmParams:
    ways: int = field(default=32, metadata={
        "help": "associativity: rows per cache set (FBGEMM's 32; sets = ceil(capacity / "
                "ways))", "min": 1})


class _FbgemmCache(Policy):
    """Shared state of both FBGEMM variants: `sets * ways` slots, a timestamp per way."""

    Params = FbgemmParams
    lfu: ClassVar[bool] = False

    def __init__(self, capacity: int, num_rows: int, **params: Any):
        super().__init__(capacity, num_rows, **params)
        ways = self.p["ways"]
        if isinstance(ways, bool) or int(ways) != ways or ways < 1:
            raise UserError(f"ways must be a whole number >= 1, got {ways}", field="ways")
        self.ways = int(ways)
        self.sets = -(-self.capacity // self.ways)
        self.capacity = self.sets * self.ways  # effective: FBGEMM rounds up to whole sets
        self.slot_row = _aligned(self.capacity, np.int64, EMPTY)
        self.row_bits = max(1, (self.num_rows - 1).bit_length())
        # one-byte tag per way (0 = empty, see `_tag`), padded to whole 64-bit words; the
        # uint64 view lets `_find` test 8 ways at once
        self.tags = _aligned(-(-self.capacity // 8) * 8, np.uint8, 0)
        self.tags64 = self.tags.view(np.uint64)
        # batch stamps (int32: 2^31 mini-batches is far beyond any trace)
        self.slot_ts = _aligned(self.capacity, np.int32, -1)
        # LFU: an access count per row (O(rows), as FBGEMM), and the count of the row in
        # each way, so a miss compares its set without touching the O(rows) array 32 times;
        # -1 marks an empty way (a placed row counts >= 1), so the victim scan needs no
        # `slot_row`. int32 while this policy has seen < 2^31 accesses (no count can be
        # larger; half the memory and half the lines a scan reads), int64 after (`_widen`).
        self.seen = 0
        self.counts = np.zeros(self.num_rows if self.lfu else 1, np.int32)
        self.slot_cnt = _aligned(self.capacity if self.lfu else 1, np.int32, -1)

    def _widen(self) -> None:
        """Counts to int64 (exact: every count so far fits int32)."""
        self.counts = self.counts.astype(np.int64)
        wide = _aligned(len(self.slot_cnt), np.int64, -1)
        wide[:] = self.slot_cnt
        self.slot_cnt = wide

    def process(self, chunk: Chunk, next_use: np.ndarray | None, outcome: np.ndarray,
                events: np.ndarray) -> None:
        self.seen += len(chunk.ids)
        if self.lfu and self.seen > _INT32_MAX and self.counts.dtype != np.int64:
            self._widen()
        _fbgemm_chunk(chunk.ids, chunk.batch_ptr, chunk.first_batch, self.sets, self.ways,
                      self.lfu, self.row_bits, self.slot_row, self.tags, self.tags64,
                      self.slot_ts, self.counts, self.slot_cnt, outcome, events)

    def resident(self) -> np.ndarray:
        return np.sort(self.slot_row[self.slot_row != EMPTY])

    def extra_totals(self) -> dict[str, int]:
        return {"sets": self.sets, "ways": self.ways}


@POLICIES.register("fbgemm-lru")
class FbgemmLRU(_FbgemmCache):
    """FBGEMM `CacheAlgorithm.LRU`: the oldest way not used by the current batch is replaced."""

    lfu = False


@POLICIES.register("fbgemm-lfu")
class FbgemmLFU(_FbgemmCache):
    """FBGEMM `CacheAlgorithm.LFU`: admit only rows more frequent than the set's weakest way."""

    lfu = True
