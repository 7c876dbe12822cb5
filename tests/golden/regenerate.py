"""The golden results: the quickstart's `run` and every study sweep's table, checked in.

tests/golden/test_golden_regression.py recomputes them and compares (counts and strings exactly,
floats to 1e-9 relative), so a refactoring that changes any number fails CI. A *model
change* (a named bug fix or a new mechanism) rewrites them in one command, and the diff of
tests/golden/*.json is reviewed with the change:

    python tests/golden/regenerate.py            # rewrite every golden file (about 2 min)
    python tests/golden/regenerate.py --check    # compare only, print the differences

What is covered (deterministic; no on-disk replay or trace cache is read or written):
- `quickstart.json`: `scratchpipe-sim run configs/quickstart.yaml --json --no-cache`, every
  key of every design's row but the host's wall-clock seconds (`*_wall_s`: not a result).
- `<sweep>.json` for each `experiments/fig*.yaml`: the rows `scratchpipe-sim sweep` stores
  (index, axis values, design, status, error, the experiment's metrics), without the point
  hash (it hashes the whole resolved config, so a new config field with a default would
  change it without changing a result). A sweep of at most `FULL_POINTS_MAX` points is
  covered whole; a larger one (fig1, fig6) by the *cross through its centre*: the centre
  takes the middle value of each axis group (a grid axis, or one zip group), and a point is
  kept when it differs from the centre in at most one group, so every value of every axis
  is run once beside the centre's values (fig1: 10 of 30 points, fig6: 7 of 20).
- `run_<name>.json` for each `tests/golden/configs/run_<name>.yaml`: that config's `run`,
  as the quickstart's. They cover what neither covers: `run_adam` (Adam's optimizer state
  in every design's moved and updated rows), `run_mixed_dims` (tables of four dims with
  Adam and a set-associative cache: fills, unplaced lookups and unplaced rows priced at
  their tables' row bytes). A new case is a new YAML file there, then
  `python tests/golden/regenerate.py run_<name>` writes its golden file alone.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_DIR = Path(__file__).resolve().parent
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
EXPERIMENTS_DIR = ROOT / "experiments"
#: run cases beside the quickstart: `run_<name>.yaml`, each its own golden case
RUN_CONFIGS_DIR = Path(__file__).resolve().parent / "configs"
#: a sweep with more points than this is covered by the cross through its centre.
FULL_POINTS_MAX = 12
#: relative tolerance of a float (a time, a ratio); counts, strings and None are exact.
REL_TOL = 1e-9
REGENERATE = "python tests/golden/regenerate.py"
#: keys that measure this host, not the model (they differ run to run): left out.
HOST_SUFFIX = "_wall_s"


def cases() -> list[str]:
    """Every golden case: the quickstart, each study sweep by file stem, then each run case
    of tests/golden/configs by file stem."""
    return (["quickstart"] + sorted(p.stem for p in EXPERIMENTS_DIR.glob("fig*.yaml"))
            + sorted(p.stem for p in RUN_CONFIGS_DIR.glob("run_*.yaml")))


def golden_path(case: str) -> Path:
    return GOLDEN_DIR / f"{case}.json"


def run_result(config: Path = QUICKSTART) -> dict[str, Any]:
    """`scratchpipe-sim run CONFIG --json --no-cache`, run in-process (the quickstart's
    config by default)."""
    from scratchpipe_sim.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = main(["run", str(config), "--json", "--no-cache", "--no-timeline",
                       "-q", "--out", str(Path(tmp) / "run")])
    if rc != 0:
        raise RuntimeError(f"scratchpipe-sim run {config} exited {rc}")
    rows = [{k: v for k, v in r.items() if not k.endswith(HOST_SUFFIX)}
            for r in json.loads(out.getvalue())]
    return {"source": str(config.relative_to(ROOT)), "rows": rows}


def quickstart_result() -> dict[str, Any]:
    """`scratchpipe-sim run configs/quickstart.yaml --json --no-cache`, run in-process."""
    return run_result(QUICKSTART)


def _groups(spec: Any) -> list[tuple[str, ...]]:
    """The sweep's axis groups: each grid axis alone, each zip group's keys together."""
    return [(a.key,) for a in spec.grid] + [tuple(a.key for a in g) for g in spec.zips]


def selected_points(spec: Any, points: list[Any]) -> list[Any]:
    """All points of a small sweep; the cross through the centre of a large one."""
    if len(points) <= FULL_POINTS_MAX:
        return list(points)
    axes = {a.key: a.values for a in spec.grid}
    axes.update({a.key: a.values for g in spec.zips for a in g})
    centre = {k: axes[k][len(axes[k]) // 2] for k in axes}
    groups = _groups(spec)

    def off_centre(p: Any) -> int:
        return sum(any(p.values[k] != centre[k] for k in g) for g in groups)

    return [p for p in points if off_centre(p) <= 1]


def sweep_result(path: Path) -> dict[str, Any]:
    """The results-table rows `scratchpipe-sim sweep --no-cache` stores for the selected
    points of one experiment, without the point hash."""
    from scratchpipe_sim.experiments.executors import Outcome
    from scratchpipe_sim.experiments.spec import expand_points, load_experiment
    from scratchpipe_sim.experiments.sweep_runner import (
        DEFAULT_METRICS,
        point_rows,
        simulate_point,
        sweep_designs,
    )

    spec = load_experiment(path)
    points = expand_points(spec)
    designs = sweep_designs(points, spec)
    metrics = spec.metrics or DEFAULT_METRICS
    chosen = selected_points(spec, points)
    rows: list[dict[str, Any]] = []
    for p in chosen:
        outcome = Outcome(p.key, simulate_point(p.config, designs, replay_cache=False),
                          None, 0.0)
        rows += [{k: v for k, v in r.items() if k != "point"}
                 for r in point_rows(p, outcome, designs, metrics, spec)]
    return {"source": str(path.relative_to(ROOT)), "points_total": len(points),
            "points": [p.index for p in chosen], "rows": rows}


def compute(case: str) -> dict[str, Any]:
    if case == "quickstart":
        return quickstart_result()
    if case.startswith("run_"):
        return run_result(RUN_CONFIGS_DIR / f"{case}.yaml")
    return sweep_result(EXPERIMENTS_DIR / f"{case}.yaml")


def dumps(data: dict[str, Any]) -> str:
    """One canonical text per result (floats as Python's shortest round-trip repr)."""
    return json.dumps(data, indent=1) + "\n"


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or math.isclose(a, b, rel_tol=REL_TOL, abs_tol=0.0)


def differences(expected: Any, actual: Any, where: str = "") -> list[str]:
    """Where `actual` differs from `expected`: exact for counts, strings, None and
    structure; `REL_TOL` relative for floats."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = [f"{where}.{k}: missing" for k in expected if k not in actual]
        out += [f"{where}.{k}: new key (value {actual[k]!r})" for k in actual
                if k not in expected]
        for k in expected:
            if k in actual:
                out += differences(expected[k], actual[k], f"{where}.{k}")
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{where}: {len(expected)} items expected, {len(actual)} got"]
        out = []
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            out += differences(e, a, f"{where}[{i}]")
        return out
    if type(expected) is float and type(actual) is float:
        return [] if _close(expected, actual) else [f"{where}: {expected!r} -> {actual!r}"]
    if type(expected) is not type(actual) or expected != actual:
        return [f"{where}: {expected!r} -> {actual!r}"]
    return []


def check(case: str, actual: dict[str, Any] | None = None) -> list[str]:
    """The differences of `case` from its golden file (computed when `actual` is None)."""
    path = golden_path(case)
    if not path.is_file():
        return [f"{path.name}: no golden file; run `{REGENERATE}`"]
    expected = json.loads(path.read_text(encoding="utf-8"))
    actual = compute(case) if actual is None else actual
    return differences(expected, json.loads(dumps(actual)), case)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="*", metavar="CASE",
                    help=f"only these (default: all): {', '.join(cases())}")
    ap.add_argument("--check", action="store_true",
                    help="compare with the golden files instead of rewriting them")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.cases) - set(cases()))
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}")
    bad = 0
    for case in args.cases or cases():
        data = compute(case)
        if args.check:
            diff = check(case, data)
            bad += bool(diff)
            print(f"{case}: {'OK' if not diff else f'{len(diff)} difference(s)'}")
            for line in diff[:40]:
                print(f"  {line}")
        else:
            golden_path(case).write_text(dumps(data), encoding="utf-8")
            print(f"{case}: wrote {golden_path(case).relative_to(ROOT)} "
                  f"({len(data['rows'])} rows)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
