"""A strict local stand-in for the OpenAI and Anthropic APIs (see server.py)."""

from .cache import AnthropicCache, OpenAIPrefixCache, tokens_of
from .coding import CodingModel, own_words, without_memories, wrapped_context
from .model import MEMORIES_RE, Answer, ToolCall, ToolLoop, View, default_reply, memory_blocks
from .rules import Problem, anthropic_problem, chat_problem, responses_problem
from .server import FakeProvider, Received
from .small_talk import small_talk, small_talk_reply

__all__ = ["MEMORIES_RE", "AnthropicCache", "Answer", "CodingModel", "own_words", "without_memories", "wrapped_context", "FakeProvider", "OpenAIPrefixCache", "Problem", "Received",
           "ToolCall", "ToolLoop", "View", "anthropic_problem", "chat_problem", "default_reply", "memory_blocks",
           "responses_problem", "small_talk", "small_talk_reply", "tokens_of"]
