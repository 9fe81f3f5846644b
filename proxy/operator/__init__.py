"""Operator tools: the inspector, per-turn explanations, metrics, audit, memory ops, who may open them."""
