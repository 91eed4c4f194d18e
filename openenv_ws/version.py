"""The package's version (``openenv_ws.__version__``), in a module that imports nothing, so
that any part of the runtime can name it without importing the package's ``__init__``."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
