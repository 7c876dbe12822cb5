"""An independent statement of the spatial sampling rule (traces/spatial_sampling.py), in
plain Python integers: splitmix64's finalizer (Vigna's reference C, `next()` of
splitmix64.c) of the table's key xor the row; the table's key is the same finalizer of
salt x 2^20 + table; a row is kept iff the hash's top 32 bits < round(R x 2^32)."""

from __future__ import annotations

M64 = 0xFFFFFFFFFFFFFFFF


def mix(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) % (1 << 64)
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 % (1 << 64)
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB % (1 << 64)
    return z ^ (z >> 31)


def kept(salt: int, table: int, row: int, rate: float) -> bool:
    key = mix((salt * (1 << 20) + table) & M64)
    return mix(key ^ row) // (1 << 32) < round(rate * (1 << 32))
