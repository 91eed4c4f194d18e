"""Environment plugins that ship with the runtime."""
