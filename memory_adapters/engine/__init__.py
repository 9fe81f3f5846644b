"""The memory engine: what makes memory good, with no HTTP and no storage code.

* `episodes.py` turns a retained turn into one episode memory (speaker's words, time, session).
* `lexical.py` (BM25) and `dense.py` (MiniLM, optional) index an agent's memories.
* `fusion.py` ranks by both, each score normalised per query (z-scores), not a fixed blend.
* `packing.py` packs the best hits, with their conversational neighbours, into dated blocks
  within the proxy's token budget and block count.
* `index.py` holds one agent's memories in memory and answers a recall with all of the above.
* `curator/` (optional, off by default) extracts directives and facts with an LLM in the
  background and leads recall with them (docs/DESIGN.md, "Curator").

Stores (`memory_adapters/embedded`, `memory_adapters/tiered`) persist memories and feed them
to an `AgentIndex`; they never rank.
"""
