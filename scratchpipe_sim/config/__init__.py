"""Config layer: frozen dataclasses, a YAML loader with presets and dotted overrides.

    load_config(path, overrides) -> Config      validated, frozen
    resolve(path_or_dict, overrides) -> dict    the resolved plain dict (`config show`
                                                fills `designs: null` with the defaults:
                                                timing.designs.with_default_designs)
    Config.from_dict(d, source=...)             validate an in-memory dict (sweeps)
"""

from scratchpipe_sim.config.hardware import (
    CpuConfig,
    CxlConfig,
    GpuConfig,
    HardwareConfig,
    PcieConfig,
    interpolate,
)
from scratchpipe_sim.config.loader import (
    CONFIGS_DIR,
    deep_merge,
    dump_yaml,
    expand_presets,
    load_config,
    parse_override,
    read_yaml,
    resolve,
    set_dotted,
)
from scratchpipe_sim.config.model import (
    OPTIMIZERS,
    CacheConfig,
    Config,
    ModelConfig,
    TablesConfig,
    TraceConfig,
    config_to_dict,
    tier_rows,
)
from scratchpipe_sim.config.schema import flatten

__all__ = [
    "CONFIGS_DIR", "OPTIMIZERS", "CacheConfig", "Config", "CpuConfig", "CxlConfig",
    "GpuConfig", "HardwareConfig", "ModelConfig", "PcieConfig", "TablesConfig", "TraceConfig",
    "config_to_dict", "deep_merge", "dump_yaml", "expand_presets", "flatten",
    "interpolate", "tier_rows",
    "load_config", "parse_override", "read_yaml", "resolve", "set_dotted",
]
