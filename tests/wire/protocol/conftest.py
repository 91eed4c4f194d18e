"""Hypothesis profiles for the protocol suite.

``protocol-fast`` (the default) keeps the suite quick; set
``OPENENV_WS_HYPOTHESIS=protocol-thorough`` for a long run.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "protocol-fast",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "protocol-thorough",
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
#: Apply with ``@PROFILE`` so the choice stays local to this suite.
PROFILE = settings.get_profile(os.environ.get("OPENENV_WS_HYPOTHESIS", "protocol-fast"))
