"""Per-rank counts (`timing/rank_streams.RankCounts`) against a per-lookup oracle's rows,
shared by the cluster's and the column-wise sharding's tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

#: the oracle row's fields, in its order: (routed, lookups, ids_send, ids_recv, unique,
#: ids_recv_all)
ORACLE_FIELDS = ("routed", "lookups", "ids_send", "ids_recv", "unique", "ids_recv_all")


def assert_counts_match(got, want: Iterable[Sequence[list[int]]]) -> None:
    """Every batch's per-rank counts equal the oracle's, field by field."""
    for b, row in enumerate(want):
        for name, expected in zip(ORACLE_FIELDS, row, strict=True):
            assert getattr(got, name)[b].tolist() == expected, (b, name)
