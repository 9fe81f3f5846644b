"""One module per provider wire format; the turn handler is generic over them."""

from .anthropic_messages import AnthropicMessages
from .base import StreamState, WireFormat
from .openai_chat import OpenAIChat
from .openai_responses import OpenAIResponses

__all__ = ["AnthropicMessages", "OpenAIChat", "OpenAIResponses", "StreamState", "WireFormat"]
