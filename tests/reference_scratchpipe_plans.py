"""Pure-Python scratchpipe plans that record victims: the oracle for the policy's refetch
columns and for the reference (CUDA) path's planner. Written from docs/policies.md."""

from __future__ import annotations

from reference_policies_b import HIT, UNPLACED


def ref_plans(ids, ptr, capacity, w, stall=False):
    """The rules of docs/policies.md once more, recording what each plan evicts and fills:
    (outcomes, victims[j], fills[j]) - the refetch oracle below needs the victims."""
    nb = len(ptr) - 1
    batches = [ids[ptr[k]:ptr[k + 1]] for k in range(nb)]
    positions = {}
    for p, r in enumerate(ids):
        positions.setdefault(r, []).append(p)

    def next_use(r, p):
        later = [x for x in positions[r] if x > p]
        return later[0] if later else float("inf")

    resident, last, outcome = set(), {}, []
    victims, fills = [[] for _ in range(nb)], [[] for _ in range(nb)]
    for j, batch in enumerate(batches):
        pinned = set().union(*batches[max(0, j - w + 1):j + 1])
        window = set().union(*batches[j + 1:j + w + 1]) if j + 1 < nb else set()
        before = set(resident)
        for i, r in enumerate(batch):
            p = ptr[j] + i
            if r in before or r in resident:
                outcome.append(HIT)
                last[r] = p
                continue
            if len(resident) == capacity:
                cand = resident - pinned
                if not cand:
                    outcome.append(UNPLACED)
                    continue
                cold = [c for c in cand if c not in window]
                victim = (min(cold, key=lambda c: last[c]) if cold
                          else max(cand, key=lambda c: next_use(c, last[c])))
                resident.remove(victim)
                victims[j].append(victim)
            resident.add(r)
            fills[j].append(r)
            outcome.append(1)
            last[r] = p
    return outcome, victims, fills


def ref_refetch(victims, fills, w):
    """counts[b][d-1]: rows filled at plan(b) whose latest eviction was at plan(b-d), d < W."""
    out = [[0] * max(w - 1, 1) for _ in fills]
    evicted_at = {}
    for b in range(len(fills)):
        for r in fills[b]:
            j = evicted_at.get(r)
            if j is not None and b - j < w:
                out[b][b - j - 1] += 1
        for r in victims[b]:
            evicted_at[r] = b
    return out
