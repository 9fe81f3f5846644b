"""What each memory service is told it has for a recall (`deadline_ms`, CONTRACT §5), learnt from
how late its answers have lately come back.

Why: the service keeps the deadline by its own clock, from when it reads the request until it
writes the answer. Around that lie the request's and the answer's way: sockets, JSON, a network
between two hosts, and on a host whose cores are all taken the wake-ups of two processes waiting
for a core (seven busy processes on two cores: 55-105 ms past the deadline at p99, more at worst;
bench/results/HISTORY.md, "Heavier contention"). Half the recall timeout is kept for that way
(`answers.deadline_ms`); when it takes more, every answer the service made "in time" reaches the
proxy after its timeout: no memories at all, turn after turn. So the proxy remembers, per agent
and recall endpoint, how far past the deadline it sent the latest answers arrived, and tells the
next recall that much less. Per agent: one agent's slow recalls (a flood of its own, a huge index)
never shorten another agent's deadline. A lower deadline costs nothing while the service is fast
(it answers long before any deadline) and, when it is slow, trades the query vector for words: a
word-ranked block instead of none. It helps where lateness lasts (a far service, a host that stays
saturated); a lone stall it cannot foresee.

The estimate rises at once to a late answer (one lost recall is already one too many) and falls
back a twentieth of the way per timely answer, so a burst of contention is forgotten within a
few dozen recalls.
"""

from __future__ import annotations

from collections import OrderedDict

from .answers import deadline_ms as usual_deadline_ms

FALL = 0.05  # share of the way back towards a timely answer's lateness, per answer
KEPT = 4096  # (agent, endpoint) pairs remembered while late; a timely one keeps no entry


class RecallDeadlines:
    """Per key (an agent's recall endpoint, `key_of`): the lateness of its answers (ms past the
    deadline sent), and from it the deadline to send next. One per proxy process, on its event loop."""

    def __init__(self) -> None:
        self._late: OrderedDict[str, float] = OrderedDict()

    @staticmethod
    def key_of(agent_id: str, url: str) -> str:
        return f"{agent_id} {url}"

    def late_ms(self, key: str) -> float:
        return self._late.get(key, 0.0)

    def deadline_ms(self, key: str, timeout_ms: int) -> int:
        """Half the timeout (`answers.deadline_ms`), less how far recent answers overshot what they
        were told beyond the room that half leaves — never below a fifth of the timeout, which
        still lets a service rank by words."""
        usual = usual_deadline_ms(timeout_ms)
        room = timeout_ms - max(10, timeout_ms // 15) - self._late.get(key, 0.0)  # what lateness leaves
        return max(0, min(usual, max(timeout_ms // 5, int(room))))

    def observe(self, key: str, sent_ms: int, latency_ms: float, timed_out: bool) -> None:
        """One recall's outcome: told `sent_ms`, answered after `latency_ms` (or not within the
        timeout, `timed_out`: then it was at least that late)."""
        late = max(0.0, latency_ms - sent_ms)
        before = self._late.pop(key, 0.0)
        if timed_out:
            # how late is unknown, only later than that; past the whole timeout says nothing more
            late = min(max(late, before) + max(10.0, 0.1 * latency_ms), latency_ms)
        now = late if late >= before else before + FALL * (late - before)
        if now >= 0.5:  # an endpoint whose answers come in time needs no entry
            self._late[key] = now
            while len(self._late) > KEPT:
                self._late.popitem(last=False)
