"""What the proxy and the memory services both need, once: the contract's wire models, the
agent-id rule, the redaction engine, structured telemetry, turn-text helpers, time and ids.

This package imports neither `proxy` nor `memory_adapters` nor `manifests`: a third party can
ship a memory service on it without the proxy.
"""
