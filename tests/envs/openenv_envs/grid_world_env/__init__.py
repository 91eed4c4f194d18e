"""A grid world laid out as OpenEnv's env packages are: ``models.py`` here, the
environment in ``server/``; nothing in it knows openenv-ws."""
