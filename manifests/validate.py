"""Validate memory.json, metadata.json and service descriptors against the JSON Schemas.

Errors name the file and the offending field so an operator can fix them without reading code.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from memplane_core.ids import AGENT_ID_SCHEMA_PATTERN


class ManifestError(ValueError):
    """A manifest, metadata file or descriptor that does not match its schema."""

    def __init__(self, source: str, field: str, message: str) -> None:
        super().__init__(f"{source}: field '{field}': {message}")
        self.source = source
        self.field = field


@cache
def _validator(name: str) -> Draft202012Validator:
    text = resources.files("manifests").joinpath("schema", f"{name}.schema.json").read_text()
    schema = json.loads(text)
    agent_id = schema.get("properties", {}).get("agent_id")
    if agent_id is not None:  # the rule lives once, in memplane_core.ids
        agent_id["pattern"] = AGENT_ID_SCHEMA_PATTERN
    return Draft202012Validator(schema)


def validate(kind: str, doc: Any, source: str) -> dict[str, Any]:
    """Check `doc` against schema `kind` (memory, metadata, describe); return it or raise."""
    errors = sorted(_validator(kind).iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        field = ".".join(str(p) for p in err.absolute_path) or "<root>"
        raise ManifestError(source, field, err.message)
    return doc


def load_json(path: Path, kind: str) -> dict[str, Any]:
    """Read and validate one JSON file; a parse error is reported as a ManifestError too."""
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ManifestError(str(path), "<root>", f"invalid JSON: {exc.msg} at line {exc.lineno}") from None
    return validate(kind, doc, str(path))
