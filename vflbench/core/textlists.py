"""How the list-valued text a user types is split, strictly: ``a,b`` and ``key=value,key=value`` lists
(``--mechanism pbm:b=32,beta=0.1``, ``--party-data``, ``--eval-epochs``, ``--datasets``...). An empty
item (``a,,b``), a trailing comma (``a,b,``) and, in key=value lists, a key given twice are refused with
one line naming the flag, instead of being skipped or overwritten silently."""

from __future__ import annotations

from .errors import VFLBenchError


def split_items(text: str, flag: str, example: str) -> list[str]:
    """``"a, b"`` -> ``["a", "b"]``; empty text -> ``[]``; an empty item is an error."""
    text = str(text).strip()
    if not text:
        return []
    items = [x.strip() for x in text.split(",")]
    if any(x == "" for x in items):
        where = (
            "a trailing comma"
            if items[-1] == ""
            else "an empty item (two commas in a row)"
            if "" in items[1:-1]
            else "a leading comma"
        )
        raise VFLBenchError(f"{flag} {text!r} has {where}; list items separated by single commas, e.g. {example}.")
    return items


def key_values(items: list[str], flag: str, example: str) -> list[tuple[str, str]]:
    """``["b=32", "beta=0.1"]`` -> ``[("b", "32"), ("beta", "0.1")]``; an item without ``=`` or a key
    given twice is an error."""
    out: list[tuple[str, str]] = []
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise VFLBenchError(f"{flag}: items are key=value, e.g. {example}; got {item!r}.")
        if any(k == key for k, _ in out):
            raise VFLBenchError(f"{flag} gives {key!r} twice; give each key once.")
        out.append((key, value.strip()))
    return out
