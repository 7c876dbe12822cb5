"""Cold start: the first `run` with an empty Numba cache against the same run warm.

Not a test: run it by hand and record the output in docs/performance.md.

    python benchmarks/bench_cold_start.py                      # quickstart, 2 pairs
    python benchmarks/bench_cold_start.py --pairs 3 --config configs/quickstart.yaml
    python benchmarks/bench_cold_start.py --tree /tmp/old      # an older checkout's code

Each pair: `scratchpipe-sim run CONFIG --no-cache --quiet` with `NUMBA_CACHE_DIR` a new empty
folder (cold: every kernel the command uses is compiled), then the same command again with
that folder (warm: every kernel is loaded from it). `--no-cache` bypasses the replay and
trace caches, so both do the same simulation work and differ only in JIT compilation.
Figures are wall seconds of the whole process (what a user waits), best of the pairs;
`--tree DIR` puts DIR first on PYTHONPATH to time another version of the package.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed_run(config: Path, numba_dir: str, out: Path, tree: str | None) -> float:
    env = dict(os.environ, NUMBA_CACHE_DIR=numba_dir)
    if tree:
        env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "scratchpipe_sim", "run", str(config), "--no-cache",
           "--quiet", "--out", str(out)]
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, cwd=tempfile.gettempdir())
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "quickstart.yaml")
    ap.add_argument("--pairs", type=int, default=2, help="cold+warm pairs (best of)")
    ap.add_argument("--tree", help="a source tree to import scratchpipe_sim from instead")
    args = ap.parse_args(argv)
    cold, warm = [], []
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
        for k in range(args.pairs):
            numba_dir = tempfile.mkdtemp(prefix=f"numba-{k}-", dir=tmp)
            cold.append(timed_run(args.config.resolve(), numba_dir, Path(tmp) / f"c{k}",
                                  args.tree))
            warm.append(timed_run(args.config.resolve(), numba_dir, Path(tmp) / f"w{k}",
                                  args.tree))
            files = sum(1 for _ in Path(numba_dir).rglob("*.nbi"))
            print(f"pair {k}: cold {cold[-1]:.1f} s, warm {warm[-1]:.1f} s, "
                  f"{files} compiled functions cached", flush=True)
    c, w = min(cold), min(warm)
    print(f"best of {args.pairs}: cold {c:.1f} s, warm {w:.1f} s, cold / warm {c / w:.2f} "
          f"(load average {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
