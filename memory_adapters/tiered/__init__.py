"""The tiered adapter: Redis short-term memory in front of MongoDB long-term memory."""
