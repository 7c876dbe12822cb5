"""No two modules of scratchpipe_sim share a file name, so a name says one job wherever it
is read (a traceback, a docs table, `git log -- '*/NAME.py'`).

The rule (docs/architecture.md, "Module names"):
* `__init__.py` is every package's and names no job;
* the two plug-in packages, `policies/` and `timing/designs/`, may reuse each other's names:
  a policy and the design built on it are one system (`scratchpipe`, `bagpipe`), and each
  package's `base.py` is its plug-in base class;
* a `cli/` module is named after its subcommand, so no other package may use that name.
`LEFT_FOR_LATER` lists the pairs still sharing a name, each with why; it may only shrink
(a pair that no longer shares its name must leave the list).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "scratchpipe_sim"
PLUGIN_PACKAGES = frozenset({"policies", "timing/designs"})
#: pairs still sharing a name, each with why (none left: issue 23 renamed the last three)
LEFT_FOR_LATER: dict[str, frozenset[str]] = {}


def _packages_by_name() -> dict[str, set[str]]:
    """{file name: the packages (paths relative to scratchpipe_sim) holding one}."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        if path.name != "__init__.py":
            found[path.name].add(path.parent.relative_to(PACKAGE).as_posix())
    return found


def shared_names(found: dict[str, set[str]]) -> dict[str, set[str]]:
    """The names the rule refuses: shared outside the plug-in packages' own reuse."""
    bad = {}
    for name, packages in found.items():
        if len(packages) > 1 and not packages <= PLUGIN_PACKAGES:
            bad[name] = packages
    return bad


def test_no_two_modules_share_a_name():
    bad = {name: pkgs for name, pkgs in shared_names(_packages_by_name()).items()
           if LEFT_FOR_LATER.get(name) != frozenset(pkgs)}
    assert not bad, (f"modules sharing a file name (rename one so each says its job; "
                     f"docs/architecture.md 'Module names'): {bad}")


def test_left_for_later_is_still_needed():
    found = _packages_by_name()
    stale = {name for name, pkgs in LEFT_FOR_LATER.items()
             if frozenset(found.get(name, ())) != pkgs}
    assert not stale, f"no longer shared, remove from LEFT_FOR_LATER: {sorted(stale)}"


def test_rule_refuses_a_cli_name_reused_elsewhere():
    """The rule itself: a subcommand's name in another package is refused, plug-ins' is not."""
    assert shared_names({"report.py": {"cli", "experiments"}}) == {
        "report.py": {"cli", "experiments"}}
    assert shared_names({"scratchpipe.py": {"policies", "timing/designs"}}) == {}
    assert shared_names({"bench.py": {"cpu", "cuda"}}) == {"bench.py": {"cpu", "cuda"}}


TESTS = Path(__file__).resolve().parents[1]
#: test folders that check the whole project rather than one package
WHOLE_PROJECT_TESTS = frozenset({"architecture", "reliability", "golden"})


def test_tests_sit_in_their_packages_folders():
    """Every test module is in tests/PACKAGE/ (a package of scratchpipe_sim) or one of the
    whole-project folders, never at tests/ itself, and no two share a file name."""
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    misplaced, names = [], defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        rel = path.relative_to(TESTS)
        names[path.name].append(str(rel))
        if len(rel.parts) != 2 or rel.parts[0] not in packages | WHOLE_PROJECT_TESTS:
            misplaced.append(str(rel))
    assert not misplaced, ("test modules outside tests/PACKAGE/ (docs/architecture.md, "
                           f"'A test'): {sorted(misplaced)}")
    shared = {n: p for n, p in names.items() if len(p) > 1}
    assert not shared, f"test modules sharing a file name: {shared}"
    assert len(names) > 50  # the walk found the suite
