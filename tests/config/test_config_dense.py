"""The dense model's config: bad input is one line naming the key (and, for a width, the
value expected), exit 2."""

from __future__ import annotations

import pytest
import yaml

from scratchpipe_sim.cli import main
from scratchpipe_sim.config import load_config
from scratchpipe_sim.errors import UserError

EIGHT = {"tables": {"count": 8, "dim": 64}}

BAD = [
    ({"precision": "fp8"}, "model.precision", "fp32"),
    ({"interaction": "dott"}, "model.interaction", "dot"),
    ({"interaction": "dcn-v2", "dcn_layers": 0, "top_mlp": [576, 1]}, "model.dcn_layers",
     ">= 1"),
    ({"top_mlp": [512, 256, 1]}, "model.top_mlp[0]", "= 100"),  # dot: 64 + 8 x 9 / 2
    ({"interaction": "cat", "top_mlp": [100, 1]}, "model.top_mlp[0]", "= 576"),
    ({"interaction": "dcn-v2", "top_mlp": [100, 1]}, "model.top_mlp[0]", "= 576"),
    ({"bottom_mlp": [13, 32]}, "model.bottom_mlp", "embedding dim 64"),
    ({"tables": {"count": 2, "dim": [16, 32]}}, "model.interaction", "cat / dcn-v2"),
]


@pytest.mark.parametrize("model, key, expected", BAD)
def test_bad_dense_config_names_its_key(model, key, expected):
    with pytest.raises(UserError) as e:
        load_config({"model": {**EIGHT, **model}})
    assert e.value.field == key and expected in str(e.value)


def test_bf16_on_a_gpu_without_it_is_refused():
    with pytest.raises(UserError) as e:
        load_config({"hardware": {"preset": "v100-gen3"}, "model": {"precision": "bf16"}})
    assert e.value.field == "model.precision"
    cfg = load_config({"hardware": {"preset": "v100-gen3"}, "model": {"precision": "fp16"}})
    assert cfg.model.precision == "fp16"


def test_defaults_derive_the_widths_from_the_interaction():
    m = load_config({"model": {**EIGHT, "interaction": "cat"}}).model
    assert m.bottom_layers == (13, 512, 256, 64)
    assert m.top_layers == (64 * 9, 512, 256, 1)


def test_cli_exits_2_with_one_line_naming_the_width(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"model": {**EIGHT, "top_mlp": [479, 1]}}))
    assert main(["config", "show", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.top_mlp[0]" in err[0] and "= 100" in err[0]
    assert str(path) in err[0]
