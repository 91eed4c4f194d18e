"""Peers measured side by side with openenv-ws (each optional: a missing one is reported, not fatal)."""
