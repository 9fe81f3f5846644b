"""Render recalled memories as one XML-escaped `<memories>` block (CONTRACT §5).

Text and attributes are escaped so a memory can never close the block or forge another one.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

from .recall_policy import InjectedMemory

_ATTR_ENTITIES = {'"': "&quot;", "'": "&apos;", "\n": "&#10;", "\r": "&#13;", "\t": "&#9;"}


def _attr(value: str) -> str:
    return '"' + escape(value, _ATTR_ENTITIES) + '"'


def render_memory(m: InjectedMemory) -> str:
    attrs = ""
    for name, value in (("kind", m.kind), ("source", m.source), ("ts", m.ts)):
        if value is not None:
            attrs += f" {name}={_attr(value)}"
    if m.score is not None:
        attrs += f' score="{m.score:.4g}"'
    return f"<memory{attrs}>{escape(m.text)}</memory>"


def render_block(service: str, memories: list[InjectedMemory]) -> str:
    lines = [f"<memories service={_attr(service)}>"]
    lines.extend(render_memory(m) for m in memories)
    lines.append("</memories>")
    return "\n".join(lines)
