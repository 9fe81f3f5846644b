"""Memory must not cost the agent its prompt cache.

Three turns of one conversation with a long system prompt — on Anthropic with the sliding
`cache_control` breakpoint its docs describe, on OpenAI with automatic prefix caching — run
through memplane against the fake provider's cache simulation (the documented rules, see
proxy/testing/fake_provider/cache.py). The user notices the bill: on turns 2 and 3 the default
placement must read at least 90 % of the cached tokens the same conversation reads without
memory, while the model still gets the remembered fact.
"""

from __future__ import annotations

import pytest

from bench.prompt_cache import measure


@pytest.mark.parametrize("api", ["anthropic", "openai", "responses"])
@pytest.mark.parametrize("placement", [None, "trailing"], ids=["default", "trailing"])
async def test_memory_keeps_at_least_90_percent_of_the_cached_prefix(tmp_path, api, placement):
    without = await measure(api, None, False, tmp_path / "plain")
    with_memory = await measure(api, placement, True, tmp_path / "memory")
    assert with_memory["remembered"], "the model never saw the remembered fact"
    assert without["cached"][1] > 1024 and without["cached"][2] > without["cached"][1]  # the cache does work
    for turn in (1, 2):
        assert with_memory["cached"][turn] >= 0.9 * without["cached"][turn], (
            f"turn {turn + 1}: {with_memory['cached'][turn]} cached tokens with memory, "
            f"{without['cached'][turn]} without")


async def test_system_placement_costs_the_conversation_its_cache(tmp_path):
    """The honest price of `system` (stated in docs/DESIGN.md): memory that changes every turn
    sits inside the system prompt, so only what comes before it is ever read from the cache."""
    without = await measure("anthropic", None, False, tmp_path / "plain")
    system = await measure("anthropic", "system", True, tmp_path / "memory")
    assert system["remembered"]
    assert system["cached"][2] < 0.9 * without["cached"][2]
