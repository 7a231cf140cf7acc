"""The network client's old import path: ``hotstore_client`` is ``hotstore.client``.

Kept so that code putting ``python/`` on ``sys.path`` (tests/python/test_server.py, the
benches) goes on working without the native part of the package being built. New code:
``import hotstore`` and use ``hotstore.Client``.
"""

from hotstore.client import *  # noqa: F401,F403
from hotstore.client import __all__, map_error  # noqa: F401
