"""The published, measured FBGEMM TBE runs (`scratchpipe_sim/data/published_points.yaml`),
declared once as frozen dataclasses and loaded with `config/schema.py`'s `build`.

Why here: `validate --published` (experiments) predicts them and the published-shapes
measurement (cuda) runs two of them on a GPU; both read the points from this one loader, so
a figure is written once, in the data file. Per-field rules are the fields' metadata (as the
config's); the rules between fields are `PublishedPoint.check(source, where)`, as a design's
Params check theirs. A bad file is one line naming the file and the dotted key.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from scratchpipe_sim.config.inputs import InputPipelineConfig
from scratchpipe_sim.config.loader import CONFIGS_DIR, read_yaml
from scratchpipe_sim.config.model import FRAMEWORKS
from scratchpipe_sim.config.schema import build
from scratchpipe_sim.errors import UserError, closest

#: the shipped data file
DATA_FILE = Path(__file__).resolve().parents[1] / "data" / "published_points.yaml"
#: FBGEMM's EmbeddingLocation -> the design that runs it
PLACEMENT_DESIGNS: dict[str, str] = {
    "DEVICE": "gpu-only", "MANAGED": "uvm", "MANAGED_CACHING": "lru-cache"}
#: the phases the sources time, in order
PHASES = ("forward", "backward")
#: optimizers a point may name (FBGEMM's, as model.optimizer spells them); one the config
#: schema does not accept yet is reported as skipped, with the schema's reason
KNOWN_OPTIMIZERS = ("sgd", "adagrad", "rowwise-adagrad", "adam")
GENERATORS = ("pow-law", "zipf", "uniform")
ROLES = ("fit", "check")
#: batches timed per point (a caching point's run must hold at least these: the timed
#: pass repeats its first TIMED_BATCHES)
TIMED_BATCHES = 5

_POSITIVE = {"gt": 0}


def _meta(help_: str, **bounds: object) -> dict[str, object]:
    return {"help": help_, **bounds}


@dataclass(frozen=True)
class PublishedModel:
    """The embedding tables and batch of a published run."""

    tables: int = field(metadata=_meta("embedding tables", **_POSITIVE))
    rows_per_table: int = field(metadata=_meta("rows of each table", **_POSITIVE))
    dim: int = field(metadata=_meta("embedding dimension", **_POSITIVE))
    bytes_per_element: int = field(metadata=_meta("bytes per weight (4: fp32)", **_POSITIVE))
    batch_size: int = field(metadata=_meta("samples per table per iteration", **_POSITIVE))
    pooling: int = field(metadata=_meta("ids per sample", **_POSITIVE))


@dataclass(frozen=True)
class PublishedTrace:
    """How the run's ids were drawn."""

    generator: str = field(metadata=_meta(
        "pow-law (recsys-examples' floor of a continuous power law on [1, rows)), zipf or "
        "uniform", choices=GENERATORS))
    alpha: float = field(metadata=_meta("the generator's exponent", **_POSITIVE))
    seed: int | None = field(metadata=_meta("the harness's seed (null: not published)"))
    iterations: int | None = field(metadata=_meta(
        "batches in the published run (null: not published)", **_POSITIVE))
    distinct_ids_per_iter: float | None = field(metadata=_meta(
        "distinct ids per iteration as published, summed over tables", **_POSITIVE))


@dataclass(frozen=True)
class PublishedCache:
    """A MANAGED_CACHING run's cache (null / false for the others)."""

    cfr: float | None = field(metadata=_meta(
        "the cache = distinct ids over the run x cfr (null: no cache)", **_POSITIVE))
    #: the TBE counted its cache misses (RecordCacheMetrics.record_cache_miss_counter)
    record_miss_counter: bool = field(metadata=_meta(
        "the TBE was built with RecordCacheMetrics(record_cache_miss_counter=True)"))


@dataclass(frozen=True)
class PublishedPhases:
    """Measured ms per iteration of each phase the source times (null: not timed)."""

    forward: float | None = field(default=None, metadata=_meta(
        "forward, ms per iteration", **_POSITIVE))
    backward: float | None = field(default=None, metadata=_meta(
        "backward with the fused optimizer update, ms per iteration", **_POSITIVE))

    def items(self) -> tuple[tuple[str, float], ...]:
        """(phase, ms) of every timed phase, in PHASES order."""
        return tuple((ph, ms) for ph in PHASES if (ms := getattr(self, ph)) is not None)

    def __contains__(self, phase: str) -> bool:
        return getattr(self, phase, None) is not None


def check_texts_and_preset(point: Any, preset: str | None, source: str | None,
                           where: str) -> None:
    """What every kind of point checks: no blank text field, and a preset that exists."""
    for f in fields(point):
        v = getattr(point, f.name)
        if isinstance(v, str) and not v.strip():
            raise UserError(f"expected a non-empty text, got {v!r}", source=source,
                            field=f"{where}.{f.name}")
    if preset is not None and preset not in known_presets():
        names = known_presets()
        raise UserError(f"no hardware preset '{preset}'{closest(preset, names)}; expected "
                        f"one of: {', '.join(names)} (or null with a skip_reason)",
                        source=source, field=f"{where}.preset")


@dataclass(frozen=True)
class PublishedPoint:
    """One published measurement with the configuration it was taken under (every key
    required; null where the source gives nothing)."""

    id: str = field(metadata=_meta("the point's name (e.g. T1.2)"))
    source: str = field(metadata=_meta("URL of the published figures"))
    gpu: str = field(metadata=_meta("the GPU, as published"))
    preset: str | None = field(metadata=_meta(
        "configs/hardware/ preset (null: none yet, then skip_reason says why)"))
    placement: str = field(metadata=_meta(
        "FBGEMM EmbeddingLocation", choices=tuple(PLACEMENT_DESIGNS)))
    design: str = field(metadata=_meta(
        "the design of the placement: " + ", ".join(f"{k} -> {v}"
                                                    for k, v in PLACEMENT_DESIGNS.items())))
    policy: str | None = field(metadata=_meta("lru-cache's cache.policy; null otherwise"))
    optimizer: str | None = field(metadata=_meta(
        "model.optimizer name (sgd = FBGEMM EXACT_SGD); null: inference",
        choices=KNOWN_OPTIMIZERS))
    model: PublishedModel = field(metadata=_meta("the tables and batch"))
    trace: PublishedTrace = field(metadata=_meta("the ids"))
    cache: PublishedCache = field(metadata=_meta("the cache"))
    measured_ms: PublishedPhases = field(metadata=_meta("measured ms per phase"))
    role: str = field(metadata=_meta(
        "fit: sets model constants; check: validates them", choices=ROLES))
    note: str = field(metadata=_meta("what was run, in the source's words"))
    skip_reason: str | None = field(metadata=_meta("why the point is not predicted"))

    def check(self, source: str | None, where: str) -> None:
        """The rules between fields (each field's own are its metadata)."""
        check_texts_and_preset(self, self.preset, source, where)
        design = PLACEMENT_DESIGNS[self.placement]
        if self.design != design:
            raise UserError(f"placement {self.placement} runs as design '{design}', got "
                            f"'{self.design}'", source=source, field=f"{where}.design")
        caching = self.design == "lru-cache"
        if (self.policy is None) == caching:
            raise UserError("expected a cache policy (e.g. lru) for MANAGED_CACHING and null "
                            f"otherwise, got {self.policy!r}", source=source,
                            field=f"{where}.policy")
        iters = self.trace.iterations
        if caching and (self.cache.cfr is None or iters is None):
            raise UserError("a MANAGED_CACHING point needs cache.cfr and trace.iterations (its "
                            "cache is distinct ids over the run x cfr)", source=source,
                            field=f"{where}.cache.cfr" if self.cache.cfr is None
                            else f"{where}.trace.iterations")
        if caching and iters is not None and iters < TIMED_BATCHES:
            raise UserError(f"expected at least {TIMED_BATCHES} batches in the run (the timed "
                            f"pass repeats its first {TIMED_BATCHES}), got {iters}",
                            source=source, field=f"{where}.trace.iterations")
        if not self.measured_ms.items():
            raise UserError(f"expected a mapping of phase -> ms ({', '.join(PHASES)})",
                            source=source, field=f"{where}.measured_ms")
        if self.optimizer is None and "backward" in self.measured_ms:
            raise UserError("a backward phase needs an optimizer (null is for inference)",
                            source=source, field=f"{where}.optimizer")
        if self.preset is None and self.skip_reason is None:
            raise UserError("a point without a hardware preset needs a skip_reason",
                            source=source, field=f"{where}.skip_reason")


#: the designs an end-to-end point runs with: one GPU with its tables in HBM, or TorchRec's
#: tables sharded over one node's GPUs
END_TO_END_DESIGNS = ("gpu-only", "multi-gpu")


@dataclass(frozen=True)
class EndToEndModel:
    """The whole model of an end-to-end run, as the source configures it."""

    tables: int = field(metadata=_meta("embedding tables", **_POSITIVE))
    rows_per_table: int | tuple[int, ...] = field(metadata=_meta(
        "rows of each table: one value or a list, one per table", **_POSITIVE))
    dim: int = field(metadata=_meta("embedding dimension", **_POSITIVE))
    pooling: int = field(metadata=_meta("ids per sample and table", **_POSITIVE))
    batch_size: int = field(metadata=_meta(
        "samples per GPU per iteration (the local batch)", **_POSITIVE))
    optimizer: str = field(metadata=_meta(
        "model.optimizer of the embeddings (the dense layers take its plain form)",
        choices=KNOWN_OPTIMIZERS))
    bottom_mlp: tuple[int, ...] = field(metadata=_meta(
        "bottom MLP widths, dense features first", **_POSITIVE))
    top_mlp: tuple[int, ...] = field(metadata=_meta(
        "top MLP widths, the interaction's output first", **_POSITIVE))
    interaction: str = field(metadata=_meta("model.interaction: dot, cat or dcn-v2"))
    precision: str = field(metadata=_meta("model.precision: fp32, tf32, bf16 or fp16"))
    dcn_layers: int | None = field(default=None, metadata=_meta(
        "dcn-v2 cross layers (null: the model's default)", **_POSITIVE))
    dcn_rank: int | None = field(default=None, metadata=_meta(
        "dcn-v2 low rank (null: the model's default)", **_POSITIVE))
    framework: str | None = field(default=None, metadata=_meta(
        "model.framework: how the source's trainer issues its ops (null: the model's "
        "default)", choices=FRAMEWORKS))
    optimizer_foreach: bool | None = field(default=None, metadata=_meta(
        "model.optimizer_foreach: false where the source's PyTorch steps the dense "
        "optimizer per tensor (<= 1.13) (null: the model's default)"))


@dataclass(frozen=True)
class EndToEndMeasured:
    """What the source measured: ms per iteration, or samples/s per GPU (exactly one)."""

    ms_per_iter: float | None = field(default=None, metadata=_meta(
        "ms per training iteration", **_POSITIVE))
    samples_per_s_per_gpu: float | None = field(default=None, metadata=_meta(
        "training samples per second per GPU", **_POSITIVE))


@dataclass(frozen=True)
class EndToEndPoint:
    """A published whole training iteration with its configuration: predicted by
    `validate --published` from every stage of its design, the dense work included."""

    id: str = field(metadata=_meta("the point's name (e.g. E3.8-dcn-16384)"))
    source: str = field(metadata=_meta("URL of the published figures"))
    gpu: str = field(metadata=_meta("the GPU, as published"))
    preset: str | None = field(metadata=_meta(
        "configs/hardware/ preset (null: none yet, then skip_reason says why)"))
    hardware: dict[str, Any] = field(metadata=_meta(
        "overrides of the preset's keys for this GPU (e.g. {gpu: {hbm_capacity_GiB: 40}})"))
    design: str = field(metadata=_meta(
        "gpu-only (one GPU) or multi-gpu (tables sharded over `gpus`)",
        choices=END_TO_END_DESIGNS))
    gpus: int = field(metadata=_meta("GPUs of the run (multi-gpu: > 1)", **_POSITIVE))
    alpha: float = field(metadata=_meta(
        "Zipf exponent of the generated ids (the source's ids are a dataset: assumed)",
        **_POSITIVE))
    model: EndToEndModel = field(metadata=_meta("the model and batch"))
    measured: EndToEndMeasured = field(metadata=_meta("what was measured"))
    role: str = field(metadata=_meta(
        "fit: sets model constants; check: validates them", choices=ROLES))
    note: str = field(metadata=_meta("what was run, in the source's words"))
    skip_reason: str | None = field(metadata=_meta("why the point is not predicted"))
    input_pipeline: dict[str, Any] = field(default_factory=dict, metadata=_meta(
        "input_pipeline keys as the source's data loader runs (e.g. {loader_in_trainer: "
        "true} for a DataLoader with num_workers=0)"))

    @property
    def measured_ms(self) -> float:
        """The measurement as ms per iteration (samples/s per GPU: local batch / rate)."""
        if self.measured.ms_per_iter is not None:
            return self.measured.ms_per_iter
        return self.model.batch_size / float(self.measured.samples_per_s_per_gpu or 1) * 1e3

    def check(self, source: str | None, where: str) -> None:
        check_texts_and_preset(self, self.preset, source, where)
        if self.preset is None and self.skip_reason is None:
            raise UserError("a point without a hardware preset needs a skip_reason",
                            source=source, field=f"{where}.skip_reason")
        if (self.design == "multi-gpu") != (self.gpus > 1):
            raise UserError(f"design {self.design} with {self.gpus} GPUs: expected gpu-only "
                            "with 1, multi-gpu with more", source=source,
                            field=f"{where}.gpus")
        # the data loader's keys as the run config takes them (unknown key, bad value:
        # one line naming end_to_end[i].input_pipeline.KEY)
        build(InputPipelineConfig, self.input_pipeline, source, f"{where}.input_pipeline")
        m = self.measured
        if (m.ms_per_iter is None) == (m.samples_per_s_per_gpu is None):
            raise UserError(f"end-to-end point {self.id}: expected exactly one of "
                            "ms_per_iter, samples_per_s_per_gpu", source=source,
                            field=f"{where}.measured")


def _require_model(raw: Any, source: str, i: int) -> None:
    """An end-to-end point without its model or batch: one line naming the point (before
    the schema, whose message would name only the index)."""
    if not isinstance(raw, dict):
        return  # the schema's message
    name = raw.get("id", f"#{i}")
    where = f"end_to_end[{i}]"
    model = raw.get("model")
    if not isinstance(model, dict):
        raise UserError(f"end-to-end point {name} has no model: expected its tables, MLPs "
                        "and batch", source=source, field=f"{where}.model")
    if model.get("batch_size") is None:
        raise UserError(f"end-to-end point {name} has no batch: expected model.batch_size "
                        "(samples per GPU per iteration)", source=source,
                        field=f"{where}.model.batch_size")


#: what a cluster point measured: a whole iteration's throughput, or the embedding part's
#: time (every stage but the MLP)
CLUSTER_QUANTITIES = ("samples_per_s", "embedding_ms")


@dataclass(frozen=True)
class ClusterPoint:
    """A published multi-GPU training measurement, priced by the `cluster` design."""

    id: str = field(metadata=_meta("the point's name (e.g. E3.6)"))
    source: str = field(metadata=_meta("URL of the published figures"))
    gpu: str = field(metadata=_meta("the GPUs, as published"))
    config: dict[str, Any] = field(metadata=_meta(
        "the run config (hardware, model, trace, design_params) that prices it"))
    quantity: str = field(metadata=_meta("what was measured", choices=CLUSTER_QUANTITIES))
    measured: float = field(metadata=_meta("the published figure", **_POSITIVE))
    role: str = field(metadata=_meta(
        "fit: sets model constants; check: validates them", choices=ROLES))
    note: str = field(metadata=_meta("what was run, and what the fit set"))


@dataclass(frozen=True)
class PublishedPointsFile:
    """The data file: the TBE points, the end-to-end points and the multi-GPU points."""

    points: tuple[PublishedPoint, ...] = field(metadata=_meta("the published points"))
    end_to_end: tuple[EndToEndPoint, ...] = field(default=(), metadata=_meta(
        "published whole training iterations"))
    cluster_points: tuple[ClusterPoint, ...] = field(default=(), metadata=_meta(
        "published multi-GPU points (the cluster design)"))


def known_presets() -> list[str]:
    """The hardware presets a point may name (configs/hardware/*.yaml)."""
    return sorted(p.stem for p in (CONFIGS_DIR / "hardware").glob("*.yaml"))


def _load(path: str | Path) -> PublishedPointsFile:
    src = str(path)
    raw = read_yaml(path, "published-points file")
    if isinstance(raw, dict) and isinstance(raw.get("end_to_end"), list):
        for i, e in enumerate(raw["end_to_end"]):
            _require_model(e, src, i)
    data: PublishedPointsFile = build(PublishedPointsFile, raw, src)
    return data


def load_end_to_end(path: str | Path = DATA_FILE) -> list[EndToEndPoint]:
    """Every end-to-end point of a data file, validated (ids unique across both lists)."""
    src = str(path)
    data = _load(path)
    seen = {p.id for p in data.points}
    for i, p in enumerate(data.end_to_end):
        p.check(src, f"end_to_end[{i}]")
        if p.id in seen:
            raise UserError(f"id '{p.id}' given twice; expected each id once", source=src,
                            field=f"end_to_end[{i}].id")
        seen.add(p.id)
    return list(data.end_to_end)


def load_points(path: str | Path = DATA_FILE) -> list[PublishedPoint]:
    """Every point of a data file, validated (a bad one: UserError naming file and key)."""
    src = str(path)
    data = _load(path)
    if not data.points:
        raise UserError("expected a non-empty list of points", source=src, field="points")
    seen: set[str] = set()
    for i, p in enumerate(data.points):
        p.check(src, f"points[{i}]")
        if p.id in seen:
            raise UserError(f"id '{p.id}' given twice; expected each id once", source=src,
                            field=f"points[{i}].id")
        seen.add(p.id)
    return list(data.points)


def load_cluster_points(path: str | Path = DATA_FILE) -> list[ClusterPoint]:
    """The cluster points of a data file (a bad one: UserError naming file and key)."""
    src = str(path)
    data = build(PublishedPointsFile, read_yaml(path, "published-points file"), src)
    ids = [p.id for p in data.points]
    for i, p in enumerate(data.cluster_points):
        if p.id in ids:
            raise UserError(f"id '{p.id}' given twice; expected each id once", source=src,
                            field=f"cluster_points[{i}].id")
        ids.append(p.id)
    return list(data.cluster_points)


def point(point_id: str, path: str | Path = DATA_FILE) -> PublishedPoint:
    """One point of a data file by its id."""
    points = load_points(path)
    ids = [p.id for p in points]
    if point_id not in ids:
        raise UserError(f"no point '{point_id}'{closest(point_id, ids)}; expected one of: "
                        f"{', '.join(ids)}", source=str(path))
    return points[ids.index(point_id)]
