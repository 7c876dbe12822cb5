"""Peak RSS and wall time of `run` against trace length (issue 41): a `.sptrace` written by
`trace gen` at 1x, 4x and 16x its batches, each `run` in a fresh process with an empty
cache folder (`--no-cache`: every replay and pass is computed), the same six designs.

    python benchmarks/bench_trace_scale.py                   # 1x = 50 batches: 50, 200, 800
    python benchmarks/bench_trace_scale.py --batches 25 --scales 1,4,16
    python benchmarks/bench_trace_scale.py --tree /tmp/old   # another checkout's package
    python benchmarks/bench_trace_scale.py --scales 1,8 --jobs 2  # the whole process tree
    python benchmarks/bench_trace_scale.py --jobs 2 --repeats 3   # min wall / CPU of three

The compile cache (NUMBA_CACHE_DIR, one for every figure) is warmed by an unrecorded first
run: compiling is not what is measured. Peak RSS is the child's `ru_maxrss`
(`resource.getrusage(RUSAGE_CHILDREN)`, one fresh child per figure, read after it exits).
The trace (8 tables x 250k rows, batch 1024, pooling 10: 81,920 lookups a batch, Zipf 1.05)
is memory-mapped from its file.
Goal: peak RSS flat within 10% from 1x to 16x.

With `--jobs N` the whole process tree (the run and its forked workers) is sampled every
20 ms (`/proc/PID/smaps_rollup`, summed): Pss, and apart its anonymous part (Pss_Anon: the
heap and arrays the run holds) and its file-backed part (Pss_File: the memory-mapped
trace's resident pages and the shared libraries, page cache the kernel can drop; a library
page that another process on the machine maps too is counted here only in part, so this
part moves with whatever else runs). Each is its own peak over the samples. The largest
single process's RSS and the tree's CPU seconds come from `wait4`'s rusage of the run.
`--repeats R` runs each figure R times (not `--day`'s): wall and CPU are the minimum of the
R, memory the maximum.

    python benchmarks/bench_trace_scale.py --day day16.sptrace --day-batches 43,174

`--day`: a synthetic Criteo-Terabyte day (or part of one) made by `trace gen --preset
criteo-terabyte-day`, run exact through the same six designs at its first N batches for
each N of `--day-batches` (65,536 samples x 26 lookups a batch; 2,781 batches are a day),
the model `criteo-terabyte` with the trace's table rows and batch size, cache 5% of the
rows; warm-up a quarter of the batches (at most 64). Peak RSS and wall as above, one
compile cache for every figure, warmed by an unrecorded run of the first 8 batches.
CPU: user + system seconds of the run and every process it forked (RUSAGE_CHILDREN of the
probe, which waits for the run, which waits for its workers; with `--jobs`, `wait4`'s
rusage of the run, and the tree's Pss, Pss_Anon and Pss_File as above): on a VM whose 2 cores other
jobs share, the wall time measures the load, and CPU / 2 bounds the wall time the same
run would take on 2 idle cores from below (from above: CPU, all of it on one core).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
#: the CLI in a child that imports the package from PYTHONPATH (`env`) alone: `-P` keeps
#: the working directory off sys.path, where `-c` would put it first (run from a checkout,
#: `--tree` measured that checkout instead of the other)
CLI = [sys.executable, "-P", "-c", "import sys; from scratchpipe_sim.cli import main; "
       "sys.exit(main(sys.argv[1:]))"]
#: the measuring child: runs the CLI in a grandchild and prints that one's peak RSS (so
#: every figure's RUSAGE_CHILDREN holds one run only)
PROBE = ("import json, resource, subprocess, sys, time; t = time.perf_counter(); "
         "rc = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL); "
         "w = time.perf_counter() - t; "
         "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
         "print(json.dumps({'rc': rc, 'wall_s': w, 'maxrss_kib': u.ru_maxrss, "
         "'cpu_s': u.ru_utime + u.ru_stime, 'user_s': u.ru_utime, 'sys_s': u.ru_stime}))")
DESIGNS = ["hybrid", "gpu-only", "static-cache", "lru-cache", "lru-prefetch", "scratchpipe"]


def env(cache: str, tree: str | None, numba: str) -> dict[str, str]:
    e = dict(os.environ)
    e["SCRATCHPIPE_CACHE_DIR"] = cache
    e["NUMBA_CACHE_DIR"] = numba  # one compile cache for every figure, warmed first
    e["PYTHONPATH"] = os.pathsep.join(p for p in (tree or str(ROOT), e.get("PYTHONPATH"))
                                      if p)
    return e


def gen(out: Path, batches: int, e: dict[str, str]) -> None:
    subprocess.run([*CLI, "trace", "gen", "--rows", "250000", "--tables", "8",
                    "--batch-size", "1024", "--pooling", "10", "--batches", str(batches),
                    "--seed", "1", "--out", str(out), "--force"], check=True, env=e,
                   stdout=subprocess.DEVNULL)


def config(path: Path, trace: Path, batches: int) -> None:
    cfg = {"name": "trace-scale", "seed": 1, "hardware": {"preset": "a100-gen4"},
           "model": {"tables": {"count": 8, "rows": 250000, "dim": 64,
                                "bytes_per_element": 4},
                     "pooling": 10, "batch_size": 1024, "optimizer": "sgd",
                     "bottom_mlp": [13, 512, 256, 64], "top_mlp": [100, 512, 256, 1],
                     "num_batches": batches - 8, "warmup_batches": 8},
           "trace": {"path": str(trace)},
           "cache": {"policy": "lru", "load_factor": 0.05},
           "design_params": {"scratchpipe": {
               "lookahead": 3, "queue_depth": 2,
               "pipeline": [["plan"], ["collect", "exchange", "insert"], ["train"]]}},
           "designs": DESIGNS}
    path.write_text(yaml.safe_dump(cfg))


def day_config(path: Path, trace: Path, batches: int) -> None:
    """The six designs on the first `batches` batches of a synthetic Criteo day."""
    m = json.loads((trace / "manifest.json").read_text())
    warm = min(64, batches // 4)
    cfg = {"name": "criteo-day", "seed": 1, "hardware": {"preset": "a100-gen4"},
           "model": {"preset": "criteo-terabyte", "tables": {"rows": m["table_rows"]},
                     "batch_size": m["batch_size"], "num_batches": batches - warm,
                     "warmup_batches": min(4, (batches - warm) // 4)},
           "trace": {"path": str(trace)},
           "cache": {"policy": "lru", "load_factor": 0.05, "warmup_batches": warm},
           "design_params": {"scratchpipe": {
               "lookahead": 3, "queue_depth": 2,
               "pipeline": [["plan"], ["collect", "exchange", "insert"], ["train"]]}},
           "designs": DESIGNS}
    path.write_text(yaml.safe_dump(cfg))


def _tree(root: int) -> list[int]:
    """`root` and every process below it (from /proc's parent links)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


#: the smaps_rollup fields summed over the tree (KiB): Pss split into the anonymous pages
#: (heap, arrays: what the run itself holds) and the file-backed ones (the memory-mapped
#: trace's resident pages, the shared libraries: page cache the kernel can drop, and a
#: library page mapped by any other process on the machine counts here only in part)
_FIELDS = ("Pss", "Pss_Anon", "Pss_File", "Rss")


def _tree_kib(root: int) -> dict[str, int]:
    """`_FIELDS` in KiB, each summed over the process tree of `root`: Pss shares a page
    that forked workers hold copy-on-write between them, Rss counts it in each."""
    out = dict.fromkeys(_FIELDS, 0)
    for p in _tree(root):
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    key, _, rest = line.partition(":")
                    if key in out:
                        out[key] += int(rest.split()[0])
        except OSError:
            pass
    return out


def measure(cfg: Path, out: Path, e: dict[str, str], jobs: int | None = None) -> dict:
    """One `run` in a fresh child: its peak RSS (the largest single process, from
    RUSAGE_CHILDREN in a probe) or, with `jobs`, also the whole process tree's peaks (the
    run and its forked workers, `_FIELDS` summed, sampled every 20 ms; each field's own
    peak) and the tree's CPU seconds and largest process (`wait4`'s rusage of the run,
    which holds its waited-for workers')."""
    run = [*CLI, "run", str(cfg), "--no-cache", "--no-timeline", "--out", str(out)]
    t = time.perf_counter()
    if jobs is None:
        res = json.loads(subprocess.run([sys.executable, "-c", PROBE, *run], check=True,
                                        env=e, capture_output=True, text=True).stdout)
    else:
        proc = subprocess.Popen([*run, "--jobs", str(jobs)], env=e,
                                stdout=subprocess.DEVNULL)
        peak = dict.fromkeys(_FIELDS, 0)
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            for k, v in _tree_kib(proc.pid).items():
                peak[k] = max(peak[k], v)
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        res = {"rc": proc.returncode, "wall_s": time.perf_counter() - t,
               "maxrss_kib": ru.ru_maxrss, "cpu_s": ru.ru_utime + ru.ru_stime,
               "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
               **{f"tree_{k.lower()}_kib": v for k, v in peak.items()}}
    res["outer_wall_s"] = time.perf_counter() - t
    return res


def combine(runs: list[dict]) -> dict:
    """Repeats of one figure as one: the least wall and CPU, the most memory."""
    out = dict(runs[0])
    for k in out:
        vals = [r[k] for r in runs]
        out[k] = (min(vals) if k.endswith("_s") else max(vals) if k.endswith("_kib")
                  else max(vals, key=abs))
    return out


def _mib(kib: int) -> str:
    return f"{kib / 1024:7.1f}"


def describe(r: dict) -> str:
    """A figure's memory, wall and CPU on one line: the largest process's RSS, and with
    `--jobs` the tree's Pss peak, its anonymous and file-backed parts' own peaks and the
    Rss sum (MiB)."""
    mem = f"largest RSS {_mib(r['maxrss_kib'])} MiB"
    if "tree_pss_kib" in r:
        mem += (f"  tree Pss {_mib(r['tree_pss_kib'])} = anon {_mib(r['tree_pss_anon_kib'])}"
                f" + file {_mib(r['tree_pss_file_kib'])} MiB (peaks; Rss sum "
                f"{_mib(r['tree_rss_kib'])})")
    cpu = (f"  CPU {r['cpu_s']:7.1f} s (user {r['user_s']:.1f}, sys {r['sys_s']:.1f})"
           if "cpu_s" in r else "")
    return f"{mem}  wall {r['wall_s']:7.1f} s{cpu}  rc {r['rc']}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=50, help="batches of the 1x trace")
    ap.add_argument("--scales", default="1,4,16")
    ap.add_argument("--tree", default=None, help="checkout to import the package from")
    ap.add_argument("--jobs", type=int, default=None,
                    help="run --jobs N, peak memory of the whole process tree (Pss summed)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs of each figure: min wall and CPU, max memory")
    ap.add_argument("--day", type=Path, default=None,
                    help="a .sptrace from trace gen --preset criteo-terabyte-day")
    ap.add_argument("--day-batches", default="43,174",
                    help="with --day: its first N batches, for each N (2,781 = a day)")
    args = ap.parse_args(argv)
    if args.day is not None:
        return day_main(args)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-trace-scale-") as tmp:
        tmpd = Path(tmp)
        numba = str(tmpd / "numba")
        scales = [int(x) for x in args.scales.split(",")]
        for s in [0, *scales]:  # 0: the smallest trace once, unrecorded, to compile
            n = args.batches * max(s, 1)
            e = env(str(tmpd / f"cache{s}"), args.tree, numba)
            trace = tmpd / f"t{s}.sptrace"
            gen(trace, n, e)
            cfgp = tmpd / f"c{s}.yaml"
            config(cfgp, trace, n)
            if s == 0:
                measure(cfgp, tmpd / f"out{s}", e, args.jobs)
                continue
            r = combine([measure(cfgp, tmpd / f"out{s}", e, args.jobs)
                         for _ in range(max(1, args.repeats))])
            r.update(scale=s, batches=n, lookups=n * 81920)
            rows.append(r)
            print(f"{s:>3}x  {n:>6} batches  {n * 81920 / 1e6:8.1f} M lookups  "
                  f"{describe(r)}", flush=True)
    keys = ["maxrss_kib"] + (["tree_pss_kib", "tree_pss_anon_kib", "tree_pss_file_kib"]
                             if args.jobs else [])
    for k in keys:  # the goal: flat within 10% (largest / 1x)
        print(f"{k[:-4]}: largest / 1x {max(r[k] for r in rows) / rows[0][k]:.3f}")
    return 0


#: the day's first batches run once, unrecorded, to fill the compile cache every figure
#: shares (a fresh SCRATCHPIPE_CACHE_DIR per figure compiled every kernel in each: ~30
#: CPU-seconds a figure, most of what looked like a fixed cost of the run)
WARM_BATCHES = 8


def day_main(args: argparse.Namespace) -> int:
    """`--day`: each prefix of the day trace through the six designs, a fresh run each."""
    per_batch = 65536 * 26
    with tempfile.TemporaryDirectory(prefix="bench-trace-day-") as tmp:
        tmpd = Path(tmp)
        numba = str(tmpd / "numba")
        for i, n in enumerate([WARM_BATCHES, *(int(x) for x in args.day_batches.split(","))]):
            e = env(str(tmpd / f"cache{i}"), args.tree, numba)
            cfgp = tmpd / f"day{i}.yaml"
            day_config(cfgp, args.day.resolve(), n)
            r = measure(cfgp, tmpd / f"out{i}", e, args.jobs)
            if i == 0:
                print(f"(compile: the first {n} batches, unrecorded: wall {r['wall_s']:.1f} s,"
                      f" CPU {r.get('cpu_s', 0):.1f} s)", flush=True)
                continue
            print(f"{n:>5} batches ({n / 2781:.4f} day)  {n * per_batch / 1e9:6.3f} B lookups  "
                  f"{describe(r)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
