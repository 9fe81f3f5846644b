"""What the curator asks the LLM for, as pydantic models: the JSON schema sent as
`response_format` and the validator of the answer are the same classes.

Limits live in validators, not in the schema, so the schema stays within what OpenAI's strict
structured outputs accept (every field required, no extra keys) while an answer over the
limits is still refused. Sources are short labels (`m3`, `f2`) the prompt gave; an answer
that cites a label it was not given is invalid (validation context `labels`).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo, field_validator

MAX_DIRECTIVES = 3
MAX_FACTS = 8
# targets of ~50 / ~25 / ~30 words; twice the target is refused as not what was asked
SUMMARY_WORDS, DIRECTIVE_WORDS, FACT_WORDS = 100, 50, 60


def _words(limit: int):
    def check(text: str) -> str:
        text = " ".join(text.split())
        if not text:
            raise ValueError("must not be empty")
        if len(text.split()) > limit or len(text) > limit * 12:
            raise ValueError(f"longer than {limit} words")
        return text
    return AfterValidator(check)


def _known_labels(labels: list[str], info: ValidationInfo) -> list[str]:
    known = (info.context or {}).get("labels")
    if not labels:
        raise ValueError("must cite at least one source label")
    if known is not None and (bad := [x for x in labels if x not in known]):
        raise ValueError(f"unknown source label(s): {', '.join(bad[:5])}")
    return list(dict.fromkeys(labels))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Directive(_Strict):
    text: Annotated[str, _words(DIRECTIVE_WORDS)]
    sources: list[str]
    importance: float

    _sources = field_validator("sources")(_known_labels)


class Fact(_Strict):
    topic: Annotated[str, _words(6)]
    text: Annotated[str, _words(FACT_WORDS)]
    sources: list[str]
    importance: float

    _sources = field_validator("sources")(_known_labels)

    @field_validator("topic")
    @classmethod
    def _slug(cls, topic: str) -> str:
        slug = "_".join("".join(c if c.isalnum() else " " for c in topic.casefold()).split())
        if not slug:
            raise ValueError("topic needs letters or digits")
        return slug[:64]


def _importance(v: float) -> float:
    if not 0.0 <= v <= 1.0:
        raise ValueError("importance must be from 0 to 1")
    return v


def _few(items: list[Any], most: int, what: str) -> list[Any]:
    """At most `most` items, each with an importance from 0 to 1."""
    if len(items) > most:
        raise ValueError(f"at most {most} {what}")
    for item in items:
        _importance(item.importance)
    return items


class Extraction(_Strict):
    """One extraction call's answer."""

    summary: Annotated[str, _words(SUMMARY_WORDS)]
    directives: list[Directive]
    facts: list[Fact]

    @field_validator("directives")
    @classmethod
    def _few_directives(cls, v: list[Directive]) -> list[Directive]:
        return _few(v, MAX_DIRECTIVES, "directives")

    @field_validator("facts")
    @classmethod
    def _few_facts(cls, v: list[Fact]) -> list[Fact]:
        return _few(v, MAX_FACTS, "facts")


class Duplicate(_Strict):
    keep: str
    drop: list[str]


class Supersession(_Strict):
    old: str
    new: str


def _labelled(value: str, info: ValidationInfo) -> str:
    known = (info.context or {}).get("labels")
    if known is not None and value not in known:
        raise ValueError(f"unknown label {value[:20]!r}")
    return value


class Consolidation(_Strict):
    """One consolidation call's answer over an agent's current facts and directives."""

    duplicates: list[Duplicate]
    superseded: list[Supersession]
    prune: list[str]

    @field_validator("prune")
    @classmethod
    def _prune_known(cls, v: list[str], info: ValidationInfo) -> list[str]:
        return [_labelled(x, info) for x in v]

    @field_validator("duplicates")
    @classmethod
    def _dups_known(cls, v: list[Duplicate], info: ValidationInfo) -> list[Duplicate]:
        for d in v:
            _labelled(d.keep, info)
            if d.keep in d.drop:
                raise ValueError("a duplicate group cannot drop what it keeps")
            for x in d.drop:
                _labelled(x, info)
        return v

    @field_validator("superseded")
    @classmethod
    def _sup_known(cls, v: list[Supersession], info: ValidationInfo) -> list[Supersession]:
        for s in v:
            _labelled(s.old, info)
            _labelled(s.new, info)
            if s.old == s.new:
                raise ValueError("a fact cannot supersede itself")
        return v


def response_format(model: type[BaseModel], name: str) -> dict[str, Any]:
    """OpenAI's `response_format` for `model` (strict json_schema)."""
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True,
                                                    "schema": model.model_json_schema()}}
