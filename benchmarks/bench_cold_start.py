"""Cold start: the first `run` with an empty Numba cache against the same run warm.

Not a test: run it by hand and record the output in docs/performance.md.

    python benchmarks/bench_cold_start.py                      # quickstart, 2 pairs
    python benchmarks/bench_cold_start.py --pairs 3 --config configs/quickstart.yaml
    python benchmarks/bench_cold_start.py --tree /tmp/old      # an older checkout's code
    python benchmarks/bench_cold_start.py --pairs 0 --jit 15   # JIT seconds per function
    python benchmarks/bench_cold_start.py --clock cpu          # CPU seconds (shared cores)

Each pair: `scratchpipe-sim run CONFIG --no-cache --quiet` with `NUMBA_CACHE_DIR` a new empty
folder (cold: every kernel the command uses is compiled), then the same command again with
that folder (warm: every kernel is loaded from it). `--no-cache` bypasses the replay and
trace caches, so both do the same simulation work and differ only in JIT compilation.
Figures are wall seconds of the whole process (what a user waits), best of the pairs
(`--clock cpu`: its CPU seconds, user + system, which a core shared with other jobs
disturbs much less than wall time);
`--tree DIR` puts DIR first on PYTHONPATH to time another version of the package.
`--jit N` adds one more cold run (in a fresh process, the same command) that listens to
Numba's compile events and prints the N functions with the most compile seconds
(inclusive of what each compiles inside it, so nested functions count twice).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _child_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed_run(config: Path, numba_dir: str, out: Path, tree: str | None,
              clock: str = "wall") -> float:
    env = dict(os.environ, NUMBA_CACHE_DIR=numba_dir)
    if tree:
        env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "scratchpipe_sim", "run", str(config), "--no-cache",
           "--quiet", "--out", str(out)]
    start, cpu0 = time.perf_counter(), _child_cpu_s()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, cwd=tempfile.gettempdir())
    return time.perf_counter() - start if clock == "wall" else _child_cpu_s() - cpu0


JIT_PROBE = """
import collections, sys, time
from numba.core import event
spent, start = collections.defaultdict(float), {}
class Listener(event.Listener):
    def on_start(self, e):
        start[id(e.data)] = time.perf_counter()
    def on_end(self, e):
        t0 = start.pop(id(e.data), None)
        d = e.data.get("dispatcher") if isinstance(e.data, dict) else None
        fn = getattr(d, "py_func", None)
        if t0 is not None and fn is not None:
            spent[f"{fn.__module__}.{fn.__qualname__}"] += time.perf_counter() - t0
event.register("numba:compile", Listener())
from scratchpipe_sim.cli import main
main(sys.argv[2:])
for name, s in sorted(spent.items(), key=lambda kv: -kv[1])[:int(sys.argv[1])]:
    print(f"{s:7.2f} s  {name}")
"""


def jit_report(config: Path, numba_dir: str, out: Path, tree: str | None, top: int) -> None:
    """One cold run with Numba's compile events tallied per function (printed)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=numba_dir)
    if tree:
        env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-c", JIT_PROBE, str(top), "run", str(config), "--no-cache",
           "--quiet", "--out", str(out)]
    p = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True,
                       cwd=tempfile.gettempdir())
    print(f"compile seconds per function (one cold run, top {top}):")
    print("\n".join(line for line in p.stdout.splitlines() if " s  " in line))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "quickstart.yaml")
    ap.add_argument("--pairs", type=int, default=2, help="cold+warm pairs (best of)")
    ap.add_argument("--tree", help="a source tree to import scratchpipe_sim from instead")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall seconds, or CPU seconds of each run (shared cores)")
    ap.add_argument("--jit", type=int, default=0, metavar="N",
                    help="one more cold run listing the N functions with most JIT seconds")
    args = ap.parse_args(argv)
    cold, warm = [], []
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
        for k in range(args.pairs):
            numba_dir = tempfile.mkdtemp(prefix=f"numba-{k}-", dir=tmp)
            cold.append(timed_run(args.config.resolve(), numba_dir, Path(tmp) / f"c{k}",
                                  args.tree, args.clock))
            warm.append(timed_run(args.config.resolve(), numba_dir, Path(tmp) / f"w{k}",
                                  args.tree, args.clock))
            files = sum(1 for _ in Path(numba_dir).rglob("*.nbi"))
            print(f"pair {k}: cold {cold[-1]:.1f} s, warm {warm[-1]:.1f} s, "
                  f"{files} compiled functions cached", flush=True)
        if args.jit:
            jit_report(args.config.resolve(), tempfile.mkdtemp(prefix="numba-jit-", dir=tmp),
                       Path(tmp) / "jit", args.tree, args.jit)
    if cold:
        c, w = min(cold), min(warm)
        print(f"best of {args.pairs} ({args.clock} seconds): cold {c:.1f} s, warm {w:.1f} s, "
              f"cold / warm {c / w:.2f} (load average {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
