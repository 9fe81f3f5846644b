"""Recall-quality evaluation on long, multi-session conversations."""
