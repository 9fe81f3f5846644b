"""The `store_memory` tool, handled in the proxy: offered to agents that opt in (memory.json
`tools`), executed by memplane against the memory service's REST API, and never seen by the agent.

* `offer.py`  when the tool is offered, and its definition in each wire format;
* `answers.py` finding, removing and answering its calls in each wire format's answer;
* `write.py`  the write itself (upsert by key), a failure reported to the model as a tool error;
* `loop.py`   the whole-answer loop: store, send the results back, at most MAX_EXTRA_CALLS more;
* `chat_stream.py` the same for streamed Chat Completions, text flowing as it arrives.
"""

from .chat_stream import relay_chat_stream
from .loop import MAX_EXTRA_CALLS, offered, relay_whole

__all__ = ["MAX_EXTRA_CALLS", "offered", "relay_chat_stream", "relay_whole"]
