"""The host's speed measured against itself (issue 43): one fixed FBGEMM workload timed
while `calibrate --cpu --kernel fbgemm` times its points and again while
`validate --cpu --against fbgemm` times its passes; the ratio of the two is how much
slower (> 1) or faster the host is now than when the constants were measured.

Why: this project's host is a VM; its speed for the same work moves by up to ~1.4x within
minutes at a guest load of ~1 (neighbours' memory traffic, frequency), and every point of a
calibration moves together (docs/validation.md, "Fourth round"). validate's drift probe
(`host.uniform_gather`) compares a measured gather with the *model's* price of it, so it
reads the model's own error on uniform gathers beside the drift. Here nothing is priced:
the same work is measured on both sides, so the ratio is the host's alone.

The workload (`REFERENCE`): FBGEMM's CPU TBE, SGD, one table of 2^19 rows x dim 64
(128 MiB of float32 weights: 4x the OS's 32 MiB LLC, 32x the 4 MiB a core keeps at
on-chip speed here, so its rows miss as the configs' tables' do), a batch of 2048 bags of
8 uniform random ids (fresh each call, drawn untimed from a fixed seed), its forward
then its backward with the fused update, one thread; a sample is the forward + backward
seconds of one call after `warm_calls` untimed ones (the call in its own steady state,
whatever ran before it). Its work is one of the update bench's own SGD fit shapes (1
table, batch 2048, pooling 8, dim 64, rows used once, at the bench's 2^19 table rows).
It carries both kinds of drift: the forward is a gather of 16k missing rows (memory-bound:
what neighbours' traffic slows), the backward sorts the ids, reduces the gradients and
writes the rows back (compute and memory); a Numba gather beside it would add nothing
the forward does not see, and is not the kernel the points time. Timed with the points'
clock (one thread's CPU time, `cpu/measure.py`) and summarised with each side's statistic
(median or best), on one thread whatever the threads of the surrounding run (restored
after).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numba as nb
import numpy as np

from scratchpipe_sim.cpu.measure import summarize, timed
from scratchpipe_sim.errors import UserError


@dataclass(frozen=True)
class ReferenceWorkload:
    """The fixed reference workload's parameters (module docstring)."""

    rows: int = 1 << 19
    dim: int = 64
    batch: int = 2048
    pooling: int = 8
    optimizer: str = "EXACT_SGD"  # FBGEMM's EmbOptimType name
    seed: int = 4343
    #: forward + backward calls (fresh ids) run untimed before each timed one. Why: the
    #: first call after other work ran 1.3-2x slower here (its buffers and translations
    #: evicted) by an amount that depends on that work (after a pass over 2 GiB of tables
    #: more than after 512 MiB), so without them validate's ratio depended on the config
    #: validated (one pair: 1.52 on the quickstart, 0.99 on small); with two, the timed
    #: call after a 2 GiB pass read as the reference alone, but for one draw in eight
    warm_calls: int = 2

    def label(self) -> str:
        return (f"FBGEMM's CPU TBE {self.optimizer} forward + backward, 1 table x "
                f"{self.rows} rows x dim {self.dim}, batch {self.batch} x pooling "
                f"{self.pooling}, uniform ids, one thread")

    @property
    def table_bytes(self) -> int:
        return self.rows * self.dim * 4


#: the one reference both commands time
REFERENCE = ReferenceWorkload()
#: validate's row for it
REFERENCE_STAGE = "host.reference"
#: the key of the raw JSON sidecar (calibrate's samples) that holds it
SIDECAR_KEY = "host_reference"


@dataclass(frozen=True)
class ReferenceSamples:
    """A reference's samples (seconds) and the statistic that summarises them; `blocks`
    names what ran around each sample (calibrate: the optimizer whose round it opened)."""

    workload: ReferenceWorkload
    statistic: str
    forward_s: tuple[float, ...]
    backward_s: tuple[float, ...]
    blocks: tuple[str, ...] = ()

    @property
    def seconds(self) -> np.ndarray:
        """Each sample's forward + backward."""
        return np.asarray(self.forward_s, float) + np.asarray(self.backward_s, float)

    def value_s(self, statistic: str | None = None) -> float:
        """The statistic (this one's unless given) over the samples."""
        return float(summarize(self.seconds, statistic or self.statistic))

    def spread_pct(self) -> float:
        t = self.seconds
        return float((np.median(t) - t.min()) / t.min() * 100) if t.min() > 0 else 0.0

    def by_block(self) -> dict[str, float]:
        """The statistic over each block's samples (seconds), in order of first sample."""
        t = self.seconds
        return {b: float(summarize(t[[x == b for x in self.blocks]], self.statistic))
                for b in dict.fromkeys(self.blocks)}

    def as_json(self) -> dict[str, Any]:
        return {"workload": asdict(self.workload), "statistic": self.statistic,
                "forward_s": list(self.forward_s), "backward_s": list(self.backward_s),
                "blocks": list(self.blocks)}

    @classmethod
    def from_json(cls, d: Any, source: str | None = None) -> ReferenceSamples:
        """From `as_json`'s dict; a UserError naming `source` and the key otherwise."""
        try:
            out = cls(ReferenceWorkload(**d["workload"]), str(d["statistic"]),
                      tuple(float(x) for x in d["forward_s"]),
                      tuple(float(x) for x in d["backward_s"]),
                      tuple(str(x) for x in d.get("blocks", ())))
            if out.statistic not in ("median", "best"):
                raise ValueError(f"statistic {out.statistic!r}")
            if len(out.forward_s) != len(out.backward_s) or (
                    out.blocks and len(out.blocks) != len(out.forward_s)):
                raise ValueError("forward_s, backward_s and blocks differ in length")
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise UserError(f"not a host reference record ({e}): expected workload, "
                            "statistic (median or best), forward_s, backward_s of one "
                            "length", source=source, field=SIDECAR_KEY) from None
        return out

    def comment(self) -> str:
        """The preset's comment line (calibrate)."""
        per = self.by_block()
        blocks = (" (per block: " + ", ".join(f"{b} {v * 1e3:.3f}" for b, v in per.items())
                  + " ms)") if len(per) > 1 else ""
        return (f"host reference (cpu/host_reference.py, validate's {REFERENCE_STAGE}): "
                f"{self.workload.label()}: {self.statistic} of {len(self.forward_s)} = "
                f"{self.value_s() * 1e3:.3f} ms{blocks}, spread {self.spread_pct():.0f}%; "
                f"samples in the raw JSON's {SIDECAR_KEY}")


def host_ratio(now: ReferenceSamples, calibration: ReferenceSamples) -> float:
    """t_ref now / t_ref at calibration, each side by its own statistic (the estimator its
    own figures use): > 1, the host is slower now."""
    return now.value_s() / calibration.value_s()


def host_adjusted(predicted: float, measured: float, ratio: float) -> float:
    """predicted x (t_ref now / t_ref at calibration) / measured: the model's ratio with the
    host's speed change since calibration taken out."""
    return predicted * ratio / measured if measured > 0 else float("inf")


def load_reference(preset: Path) -> tuple[ReferenceSamples | None, str]:
    """The reference calibrate recorded beside `preset` (its raw JSON sidecar), or None
    with why: no sidecar (a shipped or hand-written preset), none recorded (calibrated
    before issue 43 or without --kernel fbgemm), or another workload's."""
    side = preset.with_suffix(".json")
    if not side.is_file():
        return None, f"no raw samples beside the preset ({side.name})"
    try:
        doc = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UserError(f"cannot read calibrate's raw samples: {e}", source=str(side)) from None
    rec = doc.get(SIDECAR_KEY) if isinstance(doc, dict) else None
    if rec is None:
        return None, f"the preset's raw samples record no {SIDECAR_KEY} (an older calibration)"
    ref = ReferenceSamples.from_json(rec, str(side))
    if ref.workload != REFERENCE:
        return None, f"the preset's reference is another workload ({ref.workload})"
    if not ref.forward_s:
        return None, "the preset's reference has no samples"
    return ref, ""


class HostReference:
    """The reference workload built once on FBGEMM (`fb`: fbgemm_tbe.import_fbgemm()'s
    dict); `sample()` times one forward + backward on fresh ids."""

    def __init__(self, fb: dict[str, Any], workload: ReferenceWorkload = REFERENCE):
        self.torch = torch = fb["torch"]
        self.workload = w = workload
        self.tbe = fb["TBE"]([(w.rows, w.dim, fb["EmbeddingLocation"].HOST,
                               fb["ComputeDevice"].CPU)],
                             optimizer=getattr(fb["EmbOptimType"], w.optimizer),
                             learning_rate=0.01, pooling_mode=fb["PoolingMode"].SUM,
                             weights_precision=fb["SparseType"].FP32)
        self.rng = np.random.default_rng(w.seed)
        self.offsets = torch.from_numpy(np.arange(0, w.batch * w.pooling + 1, w.pooling,
                                                  dtype=np.int64))
        self.forward_s: list[float] = []
        self.backward_s: list[float] = []
        self.blocks: list[str] = []

    def clear(self) -> None:
        self.forward_s.clear()
        self.backward_s.clear()
        self.blocks.clear()

    def _call(self) -> tuple[float, float]:
        """One forward + backward on fresh ids (drawn untimed): their seconds."""
        torch, w = self.torch, self.workload
        ids = torch.from_numpy(self.rng.integers(0, w.rows, w.batch * w.pooling
                                                 ).astype(np.int64))
        out: list[Any] = []
        tf = timed(lambda: out.append(self.tbe(ids, self.offsets)))
        grad = torch.full_like(out[0], 1e-4)
        return tf, timed(lambda: out[0].backward(grad))

    def sample(self, block: str = "") -> None:
        """`warm_calls` untimed calls, then one forward + backward timed, on one thread
        (the threads restored after)."""
        torch = self.torch
        threads, nb_threads = torch.get_num_threads(), nb.get_num_threads()
        torch.set_num_threads(1)
        nb.set_num_threads(1)  # the clock: this thread's CPU time (cpu/measure.py)
        try:
            for _ in range(self.workload.warm_calls):
                self._call()
            tf, tb = self._call()
        finally:
            torch.set_num_threads(threads)
            nb.set_num_threads(nb_threads)
        self.forward_s.append(tf)
        self.backward_s.append(tb)
        self.blocks.append(block)

    def record(self, statistic: str) -> ReferenceSamples:
        return ReferenceSamples(self.workload, statistic, tuple(self.forward_s),
                                tuple(self.backward_s), tuple(self.blocks))
