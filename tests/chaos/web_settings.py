"""Settings of the chaos suite's web server (``runserver``): the workers' settings.

``runserver`` serves each request on a thread of its own and never closes
the thread's connection (Django's docs: the development server "creates a
new thread for each request it handles, negating the effect of persistent
connections"): with a ``CONN_MAX_AGE`` of 60 each request's connection stayed
open until the garbage collector found it, and 64 clients at once took 195 of
200 connection slots. The example project's settings now use 0 under
``runserver``; this module checks that they still do.
"""

from __future__ import annotations

from tests.chaos.settings import *  # noqa: F403

assert DATABASES["default"]["CONN_MAX_AGE"] == 0, "runserver must not keep connections"  # noqa: F405
