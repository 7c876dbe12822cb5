"""Start-up (issue 15): a command imports the heavy libraries only where it uses them."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

PROBE = """
import json, sys
{body}
print(json.dumps(sorted(m for m in ("pandas", "pyarrow", "numba") if m in sys.modules)))
"""


def _heavy_after(body: str) -> list[str]:
    """Which of pandas/pyarrow/numba a fresh interpreter holds after running `body`."""
    out = subprocess.run([sys.executable, "-c", PROBE.format(body=body)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_trace_format_discovery_imports_no_pandas():
    # what `cache --trace` and `trace convert` do first: list the formats, which imports
    # every reader module of scratchpipe_sim.traces (ratings and tabular among them)
    heavy = _heavy_after("from scratchpipe_sim.traces.io import READERS\n"
                         "READERS.names()\n"
                         "assert 'scratchpipe_sim.traces.ratings' in sys.modules\n"
                         "assert 'scratchpipe_sim.traces.tabular' in sys.modules")
    assert "pandas" not in heavy


def test_tabular_reader_still_reads_csv(tmp_path):
    # the reader imports pandas itself when it runs
    from scratchpipe_sim.traces.convert import ConvertOptions
    from scratchpipe_sim.traces.tabular import iter_rows

    p = tmp_path / "t.csv"
    p.write_text("sample,table,id\n0,0,5\n0,1,7\n1,0,2\n")
    blocks = list(iter_rows(p, "csv", ConvertOptions()))
    cols = [np.concatenate([b[k] for b in blocks]) for k in range(3)]
    assert [c.tolist() for c in cols] == [[0, 0, 1], [0, 1, 0], [5, 7, 2]]
