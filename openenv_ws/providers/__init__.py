"""Where servers come from: a local subprocess (the embedded default), Docker, Ray."""

from __future__ import annotations

from .local import LocalServerProvider

__all__ = ["LocalServerProvider"]
