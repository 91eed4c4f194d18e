"""``python -m openenv_ws`` runs the ``openenv-ws`` command."""

import sys

from .cli import main

sys.exit(main())
