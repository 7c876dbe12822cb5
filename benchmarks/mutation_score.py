"""Mutation score of the model's tests: cosmic-ray over chosen modules, in a copy of the tree.

Not a test and not in CI: run it by hand and record the output in docs/performance.md
("Mutation score"). It answers "would the tests catch a wrong answer?": each mutant is one
small change to the code (a comparison, an operator, a constant, a dropped loop, ...), and
a mutant that no test fails is a survivor, to be killed by a new test (exact counts vs an
oracle, closed forms, invariants) or judged equivalent (it cannot change any result).

    pip install -e .[mutation]             # cosmic-ray 8.7.0, once
    python benchmarks/mutation_score.py scratchpipe_sim/traces/store.py --sample 30
    python benchmarks/mutation_score.py scratchpipe_sim/timing/counts.py \\
        --tests tests/timing/test_timing_per_table_model.py --sample 25 --seed 1
    python benchmarks/mutation_score.py scratchpipe_sim/policies/lru.py --golden

* Each module is mutated in a copy of the working tree (under `--work`, default a temporary
  folder): the tree you edit is never touched, so it can run beside other work.
* Kernels run uncompiled (`NUMBA_DISABLE_JIT=1`): a mutant in an `@njit` function costs no
  compile, and the `@njit` decorator itself is not mutated (removing it is equivalent there).
* Tests: by default the module's matching test folder (`scratchpipe_sim/<pkg>/...` ->
  `tests/<pkg>`), or `--tests PATH ...`; `-x` stops at the first failure, so a killed mutant
  is cheap and a survivor costs the whole selection. `--golden` also runs `tests/golden` (a
  few minutes a mutant: best kept for the survivors of a first pass, with `--only-lines`).
* Every run gets a fresh replay / trace cache folder (a cached replay would hide a mutant
  of a policy: the cache is keyed by the trace and the policy, not by the code).
* `--sample N` draws N of the module's mutants (seeded: `--seed`), so a module of hundreds
  of mutants gives a score in minutes; without it, every mutant runs.
* Skipped as not informative: mutants inside annotations (never evaluated: every module
  has `from __future__ import annotations`), inside the arguments of a prefetch hint
  (`HINT_CALLS`: a hint never changes a result, and does nothing uncompiled), the
  `RemoveDecorator` operator (njit / dataclass decorators: see above), and the
  `Is`/`IsNot` swaps of `==` / `!=`.

Output: one line per module (killed / survived / incompetent / timed out, score =
killed / (killed + survived + timed out)), then each survivor's diff.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: operators whose mutants are not informative here (see the docstring)
EXCLUDED_OPERATORS = ("core/RemoveDecorator", "core/ReplaceComparisonOperator_Eq_Is",
                      "core/ReplaceComparisonOperator_Eq_IsNot",
                      "core/ReplaceComparisonOperator_NotEq_Is",
                      "core/ReplaceComparisonOperator_NotEq_IsNot")
#: folders not copied into the scratch tree (results, caches, VCS)
_IGNORE = shutil.ignore_patterns(".git", "__pycache__", "results", "out", "*.sptrace",
                                 ".ruff_cache", ".pytest_cache", ".hypothesis")


def default_tests(module: str) -> list[str]:
    """The matching test folder: scratchpipe_sim/<pkg>/x.py -> tests/<pkg>."""
    parts = Path(module).parts
    pkg = parts[1] if len(parts) > 2 and parts[0] == "scratchpipe_sim" else None
    if pkg is None or not (ROOT / "tests" / pkg).is_dir():
        raise SystemExit(f"{module}: no tests/<package> folder matches; give --tests")
    return [f"tests/{pkg}"]


def copy_tree(dest: Path) -> None:
    for name in ("scratchpipe_sim", "tests", "configs", "experiments", "traces",
                 "pyproject.toml", "setup.cfg"):
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=_IGNORE, dirs_exist_ok=True)
        elif src.is_file():
            shutil.copy2(src, dest / name)


def test_command(tests: list[str], golden: bool, deselect: list[str] = (),
                 first_failure: bool = True) -> str:
    """The command cosmic-ray runs per mutant in the scratch tree. cosmic-ray splits it with
    shlex and runs it without a shell, so the shell steps are one `sh -c` argument: a fresh
    replay / trace cache folder per run (removed after), the kernels uncompiled, pytest."""
    sel = " ".join(tests + (["tests/golden"] if golden else []))
    sel += "".join(f" --deselect {shlex.quote(d)}" for d in deselect)
    script = ("export SCRATCHPIPE_CACHE_DIR=$(mktemp -d) NUMBA_DISABLE_JIT=1 CI=true "
              f"PYTHONPATH=.; {shlex.quote(sys.executable)} -m pytest "
              f"{'-x ' if first_failure else ''}-q -p no:cacheprovider {sel}; rc=$?; "
              'rm -rf "$SCRATCHPIPE_CACHE_DIR"; exit $rc')
    return f"sh -c {shlex.quote(script)}"


def baseline_failures(tree: Path, tests: list[str], golden: bool) -> list[str]:
    """Tests that fail on the unmutated tree with the kernels uncompiled (a kernel whose
    pure-Python semantics differ from Numba's, e.g. uint8 arithmetic that wraps): they are
    deselected, and listed, since a mutant could not be told from the baseline there."""
    cmd = shlex.split(test_command(tests, golden, first_failure=False))
    cmd[-1] = cmd[-1].replace("; rc=$?", " -rfE; rc=$?")
    out = subprocess.run(cmd, cwd=tree, capture_output=True, text=True).stdout
    return sorted({line.split(" ", 1)[1].split(" - ")[0] for line in out.splitlines()
                   if line.startswith(("FAILED ", "ERROR ")) and " " in line})


def check_baseline(tree: Path, command: str) -> None:
    """The unmutated tree must pass the exact command cosmic-ray runs (split as it splits
    it): otherwise every mutant would count as killed."""
    p = subprocess.run(shlex.split(command), cwd=tree, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"the unmutated tree fails the test command (exit {p.returncode}):"
                         f"\n{command}\n{(p.stdout + p.stderr)[-3000:]}")


def write_config(path: Path, module: str, command: str, timeout_s: float) -> None:
    path.write_text(
        "[cosmic-ray]\n"
        f"module-path = {json.dumps(module)}\n"
        f"timeout = {float(timeout_s)}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(command)}\n\n"
        "[cosmic-ray.distributor]\nname = \"local\"\n")


def cosmic(*args: str, cwd: Path) -> None:
    exe = Path(sys.executable).with_name("cosmic-ray")
    subprocess.run([str(exe), *args], cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) (line, column) of every annotation of a module that imports
    `from __future__ import annotations` (none otherwise): they are never evaluated, so a
    mutant inside one (`str | None` -> `str & None`) is equivalent by construction."""
    tree = ast.parse(source)
    future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
                 and any(a.name == "annotations" for a in n.names) for n in tree.body)
    if not future:
        return []
    spans = []
    for node in ast.walk(tree):
        found = []
        if isinstance(node, ast.arg) and node.annotation is not None:
            found.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns:
            found.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
        spans += [((a.lineno, a.col_offset), (a.end_lineno, a.end_col_offset)) for a in found]
    return spans


#: calls that are only hints (`traces/_prefetch.py`: a prefetch never changes a result; in
#: pure Python the body is empty): a mutant inside one's arguments is equivalent
HINT_CALLS = ("prefetch", "prefetch_home", "_prefetch_scan")


def hint_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) (line, column) of every call to one of HINT_CALLS."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
            if name in HINT_CALLS:
                spans.append(((node.lineno, node.col_offset),
                              (node.end_lineno, node.end_col_offset)))
    return spans


def select(db: Path, sample: int | None, seed: int, only_lines: set[int] | None,
           source: str) -> int:
    """Mark as skipped the excluded operators' mutants, the mutants inside annotations or
    prefetch hints and, with `sample`, all but a seeded draw of `sample` of the rest (the
    same draw for the same source and seed); the number left to run."""
    con = sqlite3.connect(db)
    # in source order (job ids are random UUIDs: sorting by them would make a seeded draw
    # differ from run to run)
    rows = con.execute("SELECT job_id, operator_name, start_pos_row, start_pos_col "
                       "FROM mutation_specs ORDER BY start_pos_row, start_pos_col, "
                       "operator_name, operator_args, occurrence").fetchall()
    spans = annotation_spans(source) + hint_spans(source)

    def in_annotation(line: int, col: int) -> bool:
        return any(a <= (line, col) < b for a, b in spans)

    keep = [j for j, op, line, col in rows if op not in EXCLUDED_OPERATORS
            and not in_annotation(line, col)
            and (only_lines is None or line in only_lines)]
    if sample is not None and sample < len(keep):
        keep = random.Random(seed).sample(keep, sample)
    skip = sorted({r[0] for r in rows} - set(keep))
    con.executemany("INSERT INTO work_results (job_id, worker_outcome, output) "
                    "VALUES (?, 'SKIPPED', 'not drawn')", [(j,) for j in skip])
    con.commit()
    con.close()
    return len(keep)


def results(db: Path) -> tuple[dict[str, int], list[tuple[str, str, int, str]]]:
    con = sqlite3.connect(db)
    counts = {"killed": 0, "survived": 0, "incompetent": 0, "timeout": 0}
    survivors = []
    q = ("SELECT r.test_outcome, r.worker_outcome, r.output, r.diff, s.operator_name, "
         "s.start_pos_row FROM work_results r JOIN mutation_specs s USING (job_id) "
         "WHERE r.worker_outcome != 'SKIPPED'")
    for test, worker, output, diff, op, line in con.execute(q):
        if worker == "ABNORMAL" or (output or "").startswith("timeout"):
            counts["timeout"] += 1
        elif test == "SURVIVED":
            counts["survived"] += 1
            survivors.append((op, str(line), 0, diff or ""))
        elif test == "KILLED":
            counts["killed"] += 1
        else:
            counts["incompetent"] += 1
    con.close()
    return counts, sorted(survivors, key=lambda s: int(s[1]))


def run_module(module: str, tests: list[str], args: argparse.Namespace, work: Path) -> dict:
    tree = work / "tree"
    if not tree.exists():
        copy_tree(tree)
    name = module.replace("/", "_").removesuffix(".py")
    cfg, db = work / f"{name}.toml", work / f"{name}.sqlite"
    for p in (cfg, db):
        p.unlink(missing_ok=True)
    broken = baseline_failures(tree, tests, args.golden)
    for b in broken:
        print(f"{module}: deselected (fails unmutated with NUMBA_DISABLE_JIT=1): {b}")
    command = test_command(tests, args.golden, broken)
    check_baseline(tree, command)
    write_config(cfg, module, command, args.timeout)
    cosmic("init", str(cfg), str(db), cwd=tree)
    only = set(args.only_lines) if args.only_lines else None
    n = select(db, args.sample, args.seed, only, (tree / module).read_text())
    t0 = time.monotonic()
    print(f"{module}: {n} mutants, tests {' '.join(tests)}"
          f"{' + tests/golden' if args.golden else ''}", flush=True)
    cosmic("exec", str(cfg), str(db), cwd=tree)
    counts, survivors = results(db)
    scored = counts["killed"] + counts["survived"] + counts["timeout"]
    score = (counts["killed"] + counts["timeout"]) / scored if scored else float("nan")
    print(f"{module}: killed {counts['killed']}, survived {counts['survived']}, timed out "
          f"{counts['timeout']}, incompetent {counts['incompetent']}: score {score:.0%} "
          f"({time.monotonic() - t0:.0f} s)", flush=True)
    for op, line, _, diff in survivors:
        print(f"  survivor {module}:{line} {op}")
        for d in diff.splitlines():
            if d.startswith(("+", "-")) and not d.startswith(("+++", "---")):
                print(f"      {d}")
    return {"module": module, **counts, "score": score, "deselected": broken,
            "survivors": [(int(s[1]), s[0]) for s in survivors]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("modules", nargs="+", help="module files, e.g. scratchpipe_sim/traces/store.py")
    ap.add_argument("--tests", nargs="+", help="pytest paths (default: the matching folder)")
    ap.add_argument("--golden", action="store_true", help="also run tests/golden per mutant")
    ap.add_argument("--sample", type=int, help="run a seeded draw of N mutants per module")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only-lines", type=int, nargs="+", help="only mutants on these lines")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant's tests")
    ap.add_argument("--work", type=Path, help="scratch folder (default: a temporary one)")
    ap.add_argument("--json", type=Path, help="write the per-module figures here")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="mutation-"))
    work.mkdir(parents=True, exist_ok=True)
    out = []
    for module in args.modules:
        out.append(run_module(module, args.tests or default_tests(module), args, work))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
