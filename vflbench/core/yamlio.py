"""YAML as vflbench reads it: a mapping that names a key twice is an error, not the last value
silently winning (PyYAML's default)."""

from __future__ import annotations

from typing import Any

import yaml


class _UniqueKeyLoader(yaml.SafeLoader):
    pass


def _mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            continue  # let PyYAML report an unhashable key its own way
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"the key {key!r} appears twice in one mapping (lines {seen[key] + 1} and "
                f"{key_node.start_mark.line + 1}); "
                "keep one",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load(text: str) -> Any:
    """``yaml.safe_load`` that refuses duplicate keys (raises ``yaml.YAMLError``)."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
