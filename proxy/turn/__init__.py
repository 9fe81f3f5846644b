"""One agent turn through the proxy: authenticate, recall, forward, answer, record, retain.

The turn is a `Turn` value (value.py) passed through named steps; steps.py runs them top to
bottom; docs/turn.md maps each step to its module.
"""

from .provider import open_upstream
from .read import authenticate, read_json_body, session_id_of
from .record import record_turn
from .steps import handle_turn
from .value import RecallSummary, Turn

__all__ = ["RecallSummary", "Turn", "authenticate", "handle_turn", "open_upstream", "read_json_body",
           "record_turn", "session_id_of"]
