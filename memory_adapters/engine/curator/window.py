"""When to extract: new turns per agent and session, counted until a threshold is met.

Retain only appends here (no I/O, no waiting); the curator's worker asks `due()`. A user
message counts more than an agent message toward both thresholds, and an extraction never
runs on fewer than `min_messages` new messages. A window that failed waits, longer each time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from memplane_core.tokens import estimate_tokens

from ..record import StoredMemory, origin_of
from .config import CuratorSettings

MAX_BACKOFF_S = 3600.0
HELD_PER_WINDOW = 2000  # pending messages kept per window while the model is away; older ones are let go


_LABELS = (("user: ", "user"), ("assistant: ", "model"), ("tools: ", "tool"))


def said_by(m: StoredMemory) -> dict[str, str]:
    """An episode's words by who said them: `user` (the person), `model` (the assistant's reply),
    `tool` (what a tool returned). Episodes label their parts ('user: …\nassistant: …', a piece of
    the user's words, 'assistant: …', 'tools: …') and carry the part's origin; text that is not
    the user's part is never read as the user's, whatever it says."""
    origin = origin_of(m)
    out = {"user": "", "model": "", "tool": ""}
    current = {"user": "user", "model": "model", "tool": "tool"}.get(origin, "tool")
    for line in m.value.split("\n"):
        for label, who in _LABELS:
            if line.startswith(label):
                current, line = who, line[len(label):]
                break
        if origin != "user" and current == "user":
            current = "tool"  # a memory that is not the user's never has a user part
        out[current] = f"{out[current]}\n{line}" if out[current] else line
    return out


def speakers(text: str) -> tuple[str, str]:
    """An episode's user part and assistant part, from its text alone (a legacy reader)."""
    parts = said_by(StoredMemory(agent_id="", scope="agent", key="episode:", value=text, type="episode"))
    return parts["user"], parts["model"]


@dataclass
class Window:
    agent_id: str
    session_id: str
    items: list[tuple[str, int, float, float]] = field(default_factory=list)  # (episode id, messages, weighted
    messages: int = 0                                                          #  messages, weighted tokens)
    weighted_messages: float = 0.0
    weighted_tokens: float = 0.0
    attempts: int = 0
    not_before: float = 0.0
    dropped: int = 0  # messages let go while the window was held (model away a long time)

    @property
    def episode_ids(self) -> list[str]:
        return [i[0] for i in self.items]

    def add(self, m: StoredMemory, s: CuratorSettings) -> None:
        parts = said_by(m)
        user, reply = parts["user"], parts["model"]
        n, wm, wt = 0, 0.0, 0.0
        for text, weight in ((user, s.user_weight), (reply, s.agent_weight)):
            if text.strip():
                n, wm, wt = n + 1, wm + weight, wt + weight * estimate_tokens(text)
        self._push((m.id, n, wm, wt))
        if len(self.items) > HELD_PER_WINDOW:
            self.dropped += len(self.items) - HELD_PER_WINDOW
            self.keep(self.items[-HELD_PER_WINDOW:])

    def _push(self, item: tuple[str, int, float, float]) -> None:
        self.items.append(item)
        self.messages += item[1]
        self.weighted_messages += item[2]
        self.weighted_tokens += item[3]

    def keep(self, items: list[tuple[str, int, float, float]]) -> None:
        self.items, self.messages, self.weighted_messages, self.weighted_tokens = [], 0, 0.0, 0.0
        for item in items:
            self._push(item)

    def ready(self, s: CuratorSettings, now: float) -> bool:
        return (now >= self.not_before and self.messages >= s.min_messages
                and (self.weighted_messages >= s.every_messages or self.weighted_tokens >= s.every_tokens))


class Windows:
    """Pending windows of every agent and session this process retained for."""

    def __init__(self, settings: CuratorSettings) -> None:
        self.settings = settings
        self._open: dict[tuple[str, str], Window] = {}

    def __len__(self) -> int:
        return len(self._open)

    def observe(self, agent_id: str, memories: Iterable[StoredMemory]) -> None:
        for m in memories:
            if not m.key.startswith("episode:"):  # a turn's words (tiered may retype one 'constraint')
                continue
            key = (agent_id, m.session_id or "")
            w = self._open.get(key)
            if w is None:
                w = self._open[key] = Window(agent_id, key[1])
            w.add(m, self.settings)

    def due(self, now: float) -> list[Window]:
        """Ready windows, one agent's at a time in turn (no agent's backlog starves another's)."""
        by_agent: dict[str, list[Window]] = {}
        for w in self._open.values():
            if w.ready(self.settings, now):
                by_agent.setdefault(w.agent_id, []).append(w)
        out: list[Window] = []
        while by_agent:
            for agent in list(by_agent):
                out.append(by_agent[agent].pop(0))
                if not by_agent[agent]:
                    del by_agent[agent]
        return out

    def consumed(self, w: Window, episode_ids: list[str]) -> None:
        """These episodes were extracted (or are gone): the window keeps only what came since."""
        done = set(episode_ids)
        w.keep([i for i in w.items if i[0] not in done])
        w.attempts, w.not_before = 0, 0.0
        if not w.items:
            self._open.pop((w.agent_id, w.session_id), None)

    def failed(self, w: Window, now: float) -> None:
        w.attempts += 1
        w.not_before = now + min(MAX_BACKOFF_S, self.settings.retry_after_s * 2 ** (w.attempts - 1))

    def postpone(self, w: Window, until: float) -> None:
        w.not_before = max(w.not_before, until)
