"""The echo environment's server side."""
