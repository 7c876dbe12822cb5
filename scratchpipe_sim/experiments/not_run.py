"""Why a design has no value at a point, said once for many points: the reasons of a table's
infeasible and failed rows grouped into a few lines (what `compare`, the figures' notes and
the report print), so every missing value is explained without a line per point."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

#: longest reason printed (characters); a longer one ends in "..."
REASON_CHARS = 240
_NUMBER = re.compile(r"\d+(\.\d+)?(e[-+]?\d+)?")


@dataclass(frozen=True)
class Reason:
    """One design's one kind of absence: where it holds and what the table says."""
    design: str
    status: str                  # infeasible (a result) | error (a failure) | ...
    where: tuple[str, ...]       # the points (their labels), in table order
    reasons: tuple[str, ...]     # the distinct reasons (differing only in numbers)

    def line(self, where_label: str) -> str:
        at = f" at {where_label} {', '.join(self.where)}" if self.where else ""
        eg = "e.g. " if len(self.reasons) > 1 else ""
        return f"{self.design} {self.status}{at}: {eg}{self.reasons[0]}"


def short(reason: object) -> str:
    """A reason without the "source: field: " prefix of a UserError line, on one line."""
    if not isinstance(reason, str) or not reason.strip():
        return "no reason recorded"
    parts = " ".join(reason.split()).split(": ")
    while len(parts) > 1 and (" " not in parts[0] or parts[0] == "sweep point"):
        parts = parts[1:]
    text = ": ".join(parts)
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 3] + "..."


def group(rows: Iterable[tuple[str, str, str | None, object]]) -> list[Reason]:
    """(design, status, point label or None, reason) rows -> one Reason per design, status
    and reason pattern (its numbers aside), in the order they first occur."""
    found: dict[tuple[str, str, str], tuple[list[str], list[str]]] = {}
    for design, status, where, reason in rows:
        text = short(reason)
        where_list, reasons = found.setdefault(
            (str(design), str(status), _NUMBER.sub("N", text)), ([], []))
        if where is not None and where not in where_list:
            where_list.append(where)
        if text not in reasons:
            reasons.append(text)
    return [Reason(d, st, tuple(w), tuple(r)) for (d, st, _), (w, r) in found.items()]


def ranges(numbers: Iterable[int]) -> list[str]:
    """[0, 1, 2, 5, 7, 8] -> ["0-2", "5", "7-8"]."""
    out: list[list[int]] = []
    for n in sorted(set(numbers)):
        if out and n == out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return [f"{a}" if a == b else f"{a}-{b}" for a, b in out]
