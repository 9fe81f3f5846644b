"""The `store_memory` tool, handled in the proxy: offered to agents that opt in (memory.json
`tools`), executed by memplane against the memory service's REST API, and never seen by the agent.

* `offer.py`  when the tool is offered, and its definition in each wire format;
* `answers.py` finding, removing and answering its calls in each wire format's answer;
* `write.py`  the write itself (upsert by key), a failure reported to the model as a tool error;
* `loop.py`   the whole-answer loop: store, send the results back, at most MAX_EXTRA_CALLS more;
* `stream.py`  the same for streamed answers, text flowing as it arrives: one round per provider
  stream, `chat_stream.py` (Chat Completions), `messages_stream.py` (Anthropic Messages) and
  `responses_stream.py` (Responses).
"""

from .loop import MAX_EXTRA_CALLS, offered, relay_whole
from .stream import relay_stream

__all__ = ["MAX_EXTRA_CALLS", "offered", "relay_stream", "relay_whole"]
