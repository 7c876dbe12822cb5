"""The layering of docs/architecture.md, checked on the imports themselves.

Every module of the package is parsed (ast) and every `import` / `from ... import` in it,
function-level ones included, is resolved to the package it reaches. A package may import
itself and the packages of *lower* layers only; packages of one layer (cpu, cuda,
experiments) do not import each other. Root modules are `__init__`, `errors` and `registry`
(the bottom) and `__main__` (the entry point, which only starts the CLI).
"""

from __future__ import annotations

import ast
from pathlib import Path

import scratchpipe_sim

PKG = Path(scratchpipe_sim.__file__).resolve().parent
NAME = "scratchpipe_sim"

#: bottom to top; each package imports only its own layer's package and those below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("(root)",),                          # __init__, errors, registry
    ("safety",),                          # input paths, limits, memory guard, strict JSON
    ("config",),                          # dataclasses, loader, presets, schema
    ("traces",),                          # access streams, readers, generators
    ("policies",),                        # cache replacement kernels, replay cache
    ("timing",),                          # SimPy machine, designs, runner
    ("measure",),                         # what cpu/ and cuda/ both measure with
    ("cpu", "cuda", "experiments"),       # host benchmarks, GPU kernels, sweeps
    ("api",),                             # the Python API the CLI is built on
    ("cli",),                             # subcommands, one module each
    ("(main)",),                          # __main__: `python -m scratchpipe_sim`
)
ROOT_MODULES = {"__init__", "errors", "registry"}
LEVEL = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_of(module: str) -> str:
    """The layer package of a dotted module name ('(root)' for a root module)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "(root)"
    if (PKG / parts[1]).is_dir():
        return parts[1]
    return "(main)" if parts[1] == "__main__" else "(root)"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) of every package import in `path`, at any depth (and every
    `import_module` of a literal name); `from X import y` counts as X.y when y is a
    submodule."""
    mod = _module_name(path)
    here = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            # importlib.import_module("scratchpipe_sim.x"): a run-time import is one too
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if fname == "import_module" and isinstance(node.args[0].value, str):
                out.append((node.lineno, node.args[0].value))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                rel = sub.split(".")[1:]
                is_module = bool(rel) and ((PKG.joinpath(*rel).with_suffix(".py")).is_file()
                                           or PKG.joinpath(*rel).is_dir())
                out.append((node.lineno, sub if is_module else target))
    return [(line, m) for line, m in out if m == NAME or m.startswith(NAME + ".")]


def _modules() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_package_has_a_layer():
    packages = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert packages <= set(LEVEL), f"place these in LAYERS: {sorted(packages - set(LEVEL))}"


def test_root_holds_only_the_bottom_modules_and_the_entry_point():
    roots = {p.stem for p in PKG.glob("*.py")}
    assert roots <= ROOT_MODULES | {"__main__"}, (
        f"move into a layer package: {sorted(roots - ROOT_MODULES - {'__main__'})}")


#: the one import allowed to go up: the package's lazy facade, `scratchpipe_sim.simulate`
#: (`__getattr__` in __init__ loads the API on first use, so `import scratchpipe_sim`
#: itself imports nothing above the root; docs/architecture.md)
FACADE = {("scratchpipe_sim/__init__.py", "scratchpipe_sim.api")}


def test_imports_only_go_down():
    bad = []
    for path in _modules():
        src = _package_of(_module_name(path))
        for line, target in _imports(path):
            dst = _package_of(target)
            if dst == src or (str(path.relative_to(PKG.parent)), target) in FACADE:
                continue
            if LEVEL[dst] >= LEVEL[src]:
                bad.append(f"{path.relative_to(PKG.parent)}:{line} ({src}) imports "
                           f"{target} ({dst})")
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    # the reader itself: a late import inside a function is an import like any other
    src = "def f():\n    from scratchpipe_sim.timing import runner\n"
    tree = ast.parse(src)
    found = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert found and found[0].module == "scratchpipe_sim.timing"
    assert _package_of("scratchpipe_sim.timing.runner") == "timing"
    assert _package_of("scratchpipe_sim.errors") == "(root)"
    assert _package_of("scratchpipe_sim") == "(root)"
    lines = dict(_imports(PKG / "config" / "cost.py"))
    assert set(lines.values()) == {"scratchpipe_sim.config.model"}


def test_the_architecture_doc_names_every_layer_package():
    doc = (PKG.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [p for p in LEVEL if not p.startswith("(") and f"`scratchpipe_sim/{p}/`" not in doc]
    assert not missing, f"docs/architecture.md's layer table lacks {missing}"
