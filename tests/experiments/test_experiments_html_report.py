"""`scratchpipe-sim report` (issue 27): one self-contained HTML page per results folder."""

from __future__ import annotations

import html
import json
import re
import shlex
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from scratchpipe_sim.cli import main
from scratchpipe_sim.experiments.html_report import cell

SMALL = {
    "hardware": {"preset": "a100-gen4"},
    "model": {
        "tables": {"count": 2, "rows": 2000, "dim": 16},
        "pooling": 4,
        "batch_size": 64,
        "num_batches": 12,
        "warmup_batches": 2,
        "bottom_mlp": [13, 64, 16],
        "top_mlp": [19, 32, 1],
    },
    "trace": {"distribution": "zipf", "alpha": 1.1},
    "cache": {"policy": "lru", "load_factor": 0.3},
    "design_params": {"scratchpipe": {"lookahead": 5}},
    "seed": 3,
}


class _Page(HTMLParser):
    """Every tag with its attributes; text of the cells; parse errors raise."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.cells: list[str] = []
        self._in_cell = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_cell = tag in ("td", "th")

    def handle_endtag(self, tag):
        self._in_cell = False

    def handle_data(self, data):
        if self._in_cell:
            self.cells.append(data)


def parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


def check_self_contained(path: Path) -> _Page:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    page = parse(path)
    for tag, attrs in page.tags:
        for name in ("src", "href"):
            value = attrs.get(name) or ""
            assert not value.startswith(("http://", "https://", "//")), (tag, value)
        assert tag not in ("script", "link", "iframe"), tag
    imgs = [a["src"] for t, a in page.tags if t == "img"]
    assert imgs and all(s.startswith("data:image/png;base64,") for s in imgs)
    assert not re.search(r"(src|href)\s*=\s*[\"']?https?://", text)
    return page


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("report_run")
    cfg = tmp / "small.yaml"
    cfg.write_text(yaml.safe_dump(SMALL))
    out = tmp / "run"
    assert main(["run", str(cfg), "--out", str(out), "--quiet", "--no-timeline"]) == 0
    return out


@pytest.fixture(scope="module")
def sweep_folder(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("report_sweep")
    exp = tmp / "tiny.yaml"
    exp.write_text(yaml.safe_dump({
        "name": "tiny", "base": SMALL, "designs": ["hybrid", "gpu-only", "scratchpipe"],
        "metrics": ["iter_ns_mean", "speedup_vs_hybrid", "hit_ratio"],
        "sweep": {"grid": {"cache.load_factor": [0.01, 0.3]}},
        "figures": {"speedup-vs-cache-size": {}}}))
    out = tmp / "sweep"
    assert main(["sweep", str(exp), "--out", str(out), "--quiet"]) == 0
    return out


def test_run_report_is_one_self_contained_page_with_the_numbers(run_folder, capsys):
    assert main(["report", str(run_folder)]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path == run_folder / "report.html"
    page = check_self_contained(path)
    rows = json.loads((run_folder / "results.json").read_text())
    cells = set(page.cells)
    for r in rows:
        assert r["design"] in cells
        assert cell(r["iter_ns_mean"]) in cells  # the every-column table
    text = path.read_text()
    sha = (run_folder / "trace.sha256").read_text().strip()
    for word in (sha, "numba", "simpy", "numpy", "iter_us, p50_us, p99_us", "Speedups",
                 "stage-breakdown", "scratchpipe-sim run", "batch_size: 64"):
        assert word in text, word


def test_sweep_report_lists_points_that_did_not_run(sweep_folder, tmp_path, capsys):
    out = tmp_path / "sub" / "page.html"
    assert main(["report", str(sweep_folder), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    page = check_self_contained(out)
    table = (sweep_folder / "results.csv").read_text().splitlines()
    assert len(table) == 1 + 2 * 3
    text = out.read_text()
    assert "infeasible" in text and "Points that did not run" in text
    assert "speedup-vs-cache-size" in text and "geomean" in text and "not drawn" not in text
    from scratchpipe_sim.experiments.results import load_results

    ok = load_results(sweep_folder).ok()
    for v in ok["iter_ns_mean"]:
        assert cell(float(v)) in page.cells
    assert "scratchpipe-sim sweep" in text


def test_an_existing_report_is_kept_unless_forced(run_folder, tmp_path, capsys):
    out = tmp_path / "r.html"
    out.write_text("mine")
    assert main(["report", str(run_folder), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--force" in err and str(out) in err
    assert out.read_text() == "mine"
    assert main(["report", str(run_folder), "--out", str(out), "--force"]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_bands_embeds_a_sensitivity_figure(run_folder, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({**SMALL, "designs": ["hybrid", "gpu-only"]}))
    sens = tmp_path / "sens"
    assert main(["sensitivity", str(config), "--samples", "4", "--out", str(sens)]) == 0
    out = tmp_path / "with-bands.html"
    assert main(["report", str(run_folder), "--out", str(out), "--bands", str(sens)]) == 0
    page = check_self_contained(out)
    assert sum(t == "img" for t, _ in page.tags) == 2 and "tornado" in out.read_text()
    capsys.readouterr()
    assert main(["report", str(run_folder), "--out", str(tmp_path / "no.html"), "--bands",
                 str(run_folder)]) == 2
    assert "--bands" in capsys.readouterr().err and not (tmp_path / "no.html").exists()


@pytest.mark.parametrize("make", ["missing", "empty", "not-results"])
def test_bad_results_path_is_one_line_exit_2(tmp_path, capsys, make):
    target = tmp_path / "x"
    if make == "empty":
        target.mkdir()
    elif make == "not-results":
        target.write_text("hello")
    assert main(["report", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err and str(target) in err
    assert not (tmp_path / "x" / "report.html").exists()


def test_headline_first_provenance_folded_and_the_reproduce_command_works(sweep_folder,
                                                                         tmp_path, capsys):
    """The speedup table comes before any figure, table of results or config; the config
    is folded; the infeasible rows are not in the full table (they are listed once, under
    Points that did not run); the page's own `report` command runs as written."""
    out = tmp_path / "r.html"
    assert main(["report", str(sweep_folder), "--out", str(out)]) == 0
    capsys.readouterr()
    text = out.read_text()
    body = text[text.index("<body>"):]
    order = [body.index(m) for m in ('id="speedups"', "<img", "<h2>Results</h2>",
                                     "<h2>Points that did not run</h2>", "resolved config",
                                     "<h2>How to reproduce</h2>")]
    assert order == sorted(order)
    assert "<details open>" not in text and "batch_size: 64" in text
    results = body[body.index("<h2>Results</h2>"):body.index("<h2>Points that did not")]
    assert "<th>status</th>" not in results and "<th>error</th>" not in results
    assert "figcaption><b>speedup-vs-cache-size</b>: Each design" in text
    pre = re.findall(r"<pre>(.*?)</pre>", body[body.index("How to reproduce"):], re.S)[0]
    (cmd,) = [ln for ln in html.unescape(pre).splitlines()
              if ln.startswith("scratchpipe-sim report")]
    assert main(shlex.split(cmd)[1:]) == 0  # works as written: the page exists already
    assert Path(capsys.readouterr().out.strip()) == out


def _browser() -> str | None:
    return next((b for b in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(b)), None)


#: appended to a copy of the page (the report itself has no script): measures the laid-out
#: page and writes the numbers into the DOM that --dump-dom prints
MEASURE = """<script>
window.addEventListener('load', () => {
  const W = window.innerWidth, H = window.innerHeight;
  let widest = 0, who = '';
  for (const el of document.body.querySelectorAll('*')) {
    const shut = el.closest('details:not([open])');
    if (shut && !el.closest('summary')) continue;  // folded: not laid out for the reader
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > widest) { widest = r.right; who = el.tagName; }
  }
  const t = document.getElementById('speedups');
  const out = {W, H, scroll: document.documentElement.scrollWidth, widest, who,
    speedups: t ? t.getBoundingClientRect().bottom : null,
    imgs: [...document.images].map(i => i.complete && i.naturalWidth > 0)};
  const pre = document.createElement('pre');
  pre.textContent = 'MEASURED' + JSON.stringify(out) + 'END';
  document.body.appendChild(pre);
});
</script>"""
WIDTH_PX, HEIGHT_PX = 1400, 900


def _measure(page: Path, tmp: Path) -> dict:
    probe = tmp / f"measured-{page.name}"
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    args = [_browser(), "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
            f"--window-size={WIDTH_PX},{HEIGHT_PX}", "--virtual-time-budget=5000"]
    dom = subprocess.run([*args, "--dump-dom", probe.as_uri()], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    shot = tmp / f"{page.stem}.png"
    subprocess.run([*args, f"--screenshot={shot}", page.as_uri()], capture_output=True,
                   timeout=60, check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return json.loads(re.search(r"MEASURED(\{.*?\})END", dom).group(1))


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium installed (Debian: "
                    "apt-get install chromium)")
def test_both_reports_fit_1400_px_in_a_real_browser(run_folder, sweep_folder, tmp_path):
    """Chromium at 1400 px: the speedup table is on the first screen, nothing is wider than
    the window (no sideways scrolling) and every figure decodes."""
    for folder in (run_folder, sweep_folder):
        page = tmp_path / f"{folder.name}.html"
        assert main(["report", str(folder), "--out", str(page)]) == 0
        m = _measure(page, tmp_path)
        assert m["scroll"] <= m["W"] and m["widest"] <= m["W"], (folder.name, m)
        assert m["speedups"] is not None and m["speedups"] <= m["H"], (folder.name, m)
        assert m["imgs"] and all(m["imgs"]), (folder.name, m)


def test_a_run_folder_without_results_json_reports_from_its_csv(run_folder, tmp_path, capsys):
    copy = tmp_path / "old-run"
    shutil.copytree(run_folder, copy)
    (copy / "results.json").unlink()
    (copy / "report.html").unlink(missing_ok=True)
    assert main(["report", str(copy)]) == 0
    page = check_self_contained(copy / "report.html")
    rows = json.loads((run_folder / "results.json").read_text())
    for r in rows:
        assert r["design"] in page.cells and cell(r["iter_ns_mean"]) in page.cells


def test_stage_figure_ranks_a_real_runs_designs_as_its_table(run_folder):
    """On a simulated run (serial hybrid, gpu-only, static-cache, lru-cache; pipelined
    lru-prefetch, scratchpipe): the figure's bars are the table's iteration times, so its
    ranking is the table's; a serial design's stages never reach past its bar."""
    from scratchpipe_sim.experiments.plots import design_stages, make_figure, stage_columns
    from scratchpipe_sim.experiments.results import load_results

    res = load_results(run_folder)
    rows = json.loads((run_folder / "results.json").read_text())
    fig = make_figure(res, "stage-breakdown")
    ax = fig.axes[0]
    bars = {p.get_gid().split(":")[1]: p.get_width() for p in ax.patches
            if (p.get_gid() or "").startswith("iteration:")}
    table = {r["design"]: r["iter_ns_mean"] / 1e3 for r in rows}
    assert bars == pytest.approx(table)
    assert sorted(bars, key=bars.get) == sorted(table, key=table.get)
    kinds = {r.design: r.serial for r in design_stages(res.ok(), stage_columns(res.ok()))}
    assert kinds["hybrid"] and not kinds["scratchpipe"]
    for d, serial in kinds.items():
        stages = [p for p in ax.patches if (p.get_gid() or "").startswith(f"stage:{d}:")]
        if serial:
            assert max(p.get_x() + p.get_width() for p in stages) <= bars[d] * 1.02 + 1e-9
        else:
            assert {p.get_x() for p in stages} == {0.0}  # side by side, none stacked


def test_report_and_plot_draw_the_same_figure(run_folder, tmp_path, capsys):
    """The report embeds exactly the PNG `plot` writes (same function, size and dpi), so a
    design's colour and marker are the same in both."""
    import base64

    assert main(["plot", str(run_folder), "--figure", "stage-breakdown", "--format", "png",
                 "--out", str(tmp_path / "fig")]) == 0
    out = tmp_path / "r.html"
    assert main(["report", str(run_folder), "--out", str(out)]) == 0
    capsys.readouterr()
    (src,) = re.findall(r'src="data:image/png;base64,([^"]+)"', out.read_text())
    assert base64.b64decode(src) == (tmp_path / "fig.png").read_bytes()
