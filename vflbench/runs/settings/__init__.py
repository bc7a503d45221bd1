"""Run settings and run fields, declared once, one module a concept (the machinery that turns the declarations into
the CLI, the experiment-file keys, the run key and the manifest is :mod:`vflbench.runs.schema`):

- ``run``: the run's seed, parties, missingness, preset, labelled and aligned samples, target and evaluated epochs;
- ``boundary``: the mechanism and secure aggregation at the party-to-server boundary, compression, local steps;
- ``runtime``: processes, restarts, the emulated network, the parties' noise source, injected failures;
- ``wrong``: blocks present but wrong (corrupted, misaligned) at training and test, and screening them as missing;
- ``threats``: attacks and label defenses;
- ``fields``: the structure of a run (dataset, method, partitioner, protocol, option dicts, hyper-parameters, model).

Adding a setting is a :func:`~vflbench.runs.schema.declare` call in the module of its concept and the code that uses
it (``run.settings[name]``); docs/SETTINGS.md walks through one. The modules are imported in this order, which is the
order of the CLI's options and of the manifest's settings.
"""

from importlib import import_module

from ..schema import (  # noqa: F401  (the machinery, re-exported: callers name the declarations' module)
    FIELDS,
    SCHEMA_VERSION,
    SETTINGS,
    Context,
    Field,
    Setting,
    cli_parameters,
    columns,
    declare,
    declare_field,
    experiment_field_keys,
    experiment_keys,
    experiment_values,
    field_option,
    field_parameters,
    finish_settings,
    from_manifest,
    key_dict,
    merge_hp_flags,
    number,
    parse_hp,
    parse_int_list,
    parse_kv,
    request,
    resolve_settings,
    to_json,
    top_json,
)
from .fields import TABLE_OPTIONS  # noqa: F401
from .run import share_epoch  # noqa: F401

# the declarations, in the order of the CLI's options and the manifest's settings (fields last)
for _concept in ("run", "wrong", "boundary", "runtime", "threats", "fields"):
    import_module(f"{__name__}.{_concept}")
