"""Protocol v1, sans-I/O: typed frames, encode/decode, error codes, session states.

The public names of the codec in :mod:`openenv_ws.wire` (all but its framing),
in one place for imports such as ``from openenv_ws.protocol import Step, encode``.
``protocol/SPEC.md`` is the normative description.

Example::

    >>> data = encode(Step(id=7, action=3))
    >>> decode_client_frame(data)
    Step(id=7, action=3, obs=True)
"""

from __future__ import annotations

# Each module's __all__ is its public API; this one is their union.
from .wire import codes as _codes
from .wire import decode as _decode
from .wire import frames as _frames
from .wire import limits as _limits
from .wire import native as _native
from .wire import session as _session
from .wire.codes import *  # noqa: F403
from .wire.decode import *  # noqa: F403
from .wire.encode import encode
from .wire.frames import *  # noqa: F403
from .wire.limits import *  # noqa: F403
from .wire.native import *  # noqa: F403
from .wire.session import *  # noqa: F403

__all__ = [
    "encode",
    *_codes.__all__,
    *_decode.__all__,
    *_frames.__all__,
    *_limits.__all__,
    *_native.__all__,
    *_session.__all__,
]
