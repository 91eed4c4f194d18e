"""The echo environment's models: OpenEnv's MCP tool call and its observation."""

from __future__ import annotations

from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

__all__ = ["CallToolAction", "CallToolObservation"]
