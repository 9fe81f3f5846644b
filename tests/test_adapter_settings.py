"""An operator's environment reaches the memory services through their settings classes, read
once at start; a bad value stops the start with the variable's name, never a traceback later."""

from __future__ import annotations

import pytest

from memory_adapters.embedded.config import EmbeddedSettings
from memory_adapters.tiered.config import TieredSettings


def test_the_operators_environment_sets_the_embedded_service(monkeypatch):
    monkeypatch.setenv("MEMPLANE_EMBEDDINGS", "off")
    monkeypatch.setenv("MEMPLANE_ENCODER_THREADS", "2")
    monkeypatch.setenv("MEMPLANE_MAX_MEMORIES_PER_AGENT", "500")
    monkeypatch.setenv("MEMPLANE_RECALLS_PER_AGENT", "3")
    assert EmbeddedSettings.from_env() == EmbeddedSettings(embeddings="off", encoder_threads=2,
                                                           max_memories_per_agent=500, recalls_per_agent=3)
    assert EmbeddedSettings.from_env(recalls_per_agent=8).recalls_per_agent == 8  # a flag beats the variable


def test_recall_slots_reach_the_tiered_service_too(monkeypatch):
    monkeypatch.setenv("MEMPLANE_RECALLS_PER_AGENT", "2")
    assert TieredSettings.from_env().recalls_per_agent == 2
    monkeypatch.delenv("MEMPLANE_RECALLS_PER_AGENT")
    assert TieredSettings.from_env().recalls_per_agent == 4


@pytest.mark.parametrize("name,value,says", [
    ("MEMPLANE_RECALLS_PER_AGENT", "0", "at least 1"),
    ("MEMPLANE_RECALLS_PER_AGENT", "many", "whole number"),
    ("MEMPLANE_MAX_MEMORIES_PER_AGENT", "-5", "at least 0"),
])
def test_a_bad_value_names_the_variable(monkeypatch, name, value, says):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=f"{name}.*{says}"):
        EmbeddedSettings.from_env()


def test_a_bad_tiered_value_names_the_variable(monkeypatch):
    monkeypatch.setenv("CONSOLIDATE_EVERY_S", "soon")
    with pytest.raises(ValueError, match="CONSOLIDATE_EVERY_S must be a number"):
        TieredSettings.from_env()
