"""What memplane has seen of an agent's main calls, per session: the yardstick side calls are told by.

A coding agent's *main* calls carry its conversation with the person: they offer tools or resend
an earlier answer. Per agent (and per session the client names) memplane remembers their system
prompts (digests), their models, the project they declared and the first message of their
conversation. A later call is read against that (`side_calls.py`): a one-shot with another system
prompt or another model in the same session is the client's own errand, not the person's turn;
a call of a declared project's session that declares nothing still belongs to that project.

Kept in the proxy's memory, bounded (least recently seen first out), like the recurrence counts:
after a restart an agent's first calls are read by their own shape only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from cachetools import LRUCache

MAX_AGENTS = 10_000
MAX_SESSIONS = 50_000  # (agent, session) pairs across agents, ~20 MB at most
MAX_SESSIONS_PER_AGENT = 1_000  # one agent's share: its flood of new session ids evicts only its own
MAX_MAINS = 16  # system prompts / models per agent
MAX_HANDED = 256  # texts an agent's model handed to its tools lately (handed.py), per agent
MAX_ANSWERS = 256  # answers of an agent's calls without tools lately, with what each answered (text_loops.py)
RECENT_S = 3600.0  # an agent's latest declared project stays its "recent" one this long


@dataclass
class SessionSeen:
    system: str  # digest of the first main call's system text
    model: str | None
    first: str  # digest of the conversation's first message
    project: str | None = None
    tools: bool = False  # a main call of the session offered tools (a coding client's, not a chat's)


class _Owned(LRUCache):
    """One agent's session keys in the shared store, at most `maxsize`: the key this cache lets go
    leaves the shared store with it, so an agent naming a new session on every call only ever pushes
    out its own sessions, never another agent's."""

    def __init__(self, maxsize: int, store: LRUCache[tuple[str, str], SessionSeen]) -> None:
        super().__init__(maxsize)
        self._store = store

    def popitem(self):  # cachetools calls this to evict
        key, value = super().popitem()
        self._store.pop(key, None)
        return key, value


class Sessions:
    """One agent's view of the book's sessions (one bounded store for every agent)."""

    def __init__(self, store: LRUCache[tuple[str, str], SessionSeen], agent_id: str,
                 per_agent: int = MAX_SESSIONS_PER_AGENT) -> None:
        self._store, self._agent = store, agent_id
        self._own = _Owned(per_agent, store)

    def get(self, session: str) -> SessionSeen | None:
        return self._store.get((self._agent, session))

    def __setitem__(self, session: str, seen: SessionSeen) -> None:
        key = (self._agent, session)
        self._own[key] = True
        self._store[key] = seen


@dataclass
class AgentSeen:
    sessions: Sessions
    systems: LRUCache[str, bool] = field(default_factory=lambda: LRUCache(MAX_MAINS))
    models: LRUCache[str, bool] = field(default_factory=lambda: LRUCache(MAX_MAINS))
    handed: LRUCache[str, bool] = field(default_factory=lambda: LRUCache(MAX_HANDED))  # digests (handed.py)
    # an answer's digest -> the digest of the user message it answered (text_loops.py)
    answers: LRUCache[str, str] = field(default_factory=lambda: LRUCache(MAX_ANSWERS))
    tools: bool = False  # a main call offered tools (an agent with a tool loop, not a chat)
    # the first message (digest) of main calls with tools lately -> their system prompt and tools (digests)
    opened: LRUCache[str, tuple[str, str]] = field(default_factory=lambda: LRUCache(MAX_ANSWERS))
    declared_at: float = 0.0  # when a main call last declared a project (monotonic)
    told: bool = False  # the "declares no project" notice was logged

    @property
    def has_mains(self) -> bool:
        return len(self.systems) > 0

    def declared_recently(self) -> bool:
        return self.declared_at > 0 and time.monotonic() - self.declared_at < RECENT_S


class SessionBook:
    """Every agent's `AgentSeen`, bounded."""

    def __init__(self, max_agents: int = MAX_AGENTS, max_sessions: int = MAX_SESSIONS,
                 per_agent: int = MAX_SESSIONS_PER_AGENT) -> None:
        self._agents: LRUCache[str, AgentSeen] = LRUCache(maxsize=max_agents)
        self._sessions: LRUCache[tuple[str, str], SessionSeen] = LRUCache(maxsize=max_sessions)
        self._per_agent = per_agent

    def of(self, agent_id: str) -> AgentSeen:
        seen = self._agents.get(agent_id)
        if seen is None:
            seen = self._agents[agent_id] = AgentSeen(Sessions(self._sessions, agent_id, self._per_agent))
        return seen

    def handed(self, agent_id: str, digests: list[str]) -> None:
        """Texts the agent's model just passed to a tool: a call opening with one is a subagent's."""
        handed = self.of(agent_id).handed
        for d in digests:
            handed[d] = True

    def answered(self, agent_id: str, answer: str, request: str) -> None:
        """The answer (digest) a call without tools got, and the user message (digest) it answered."""
        self.of(agent_id).answers[answer] = request

    def main_call(self, agent_id: str, session: str | None, system: str, model: str | None, first: str,
                  project: str | None, tools: bool = False, toolset: str = "") -> None:
        """Record a main call: its system prompt and model become the agent's (and its session's)."""
        seen = self.of(agent_id)
        seen.systems[system] = True
        seen.tools = seen.tools or tools
        if tools and first not in seen.opened:  # the prompt that first took these words stays theirs
            seen.opened[first] = (system, toolset)
        if model:
            seen.models[model] = True
        if project:
            seen.declared_at = time.monotonic()
        if session is None:
            return
        known = seen.sessions.get(session)
        if known is None:
            seen.sessions[session] = SessionSeen(system, model, first, project, tools)
        else:
            known.project = project or known.project
            known.tools = known.tools or tools
