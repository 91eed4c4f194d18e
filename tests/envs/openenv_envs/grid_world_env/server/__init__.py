"""The grid world's server side."""
