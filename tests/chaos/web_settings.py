"""Settings of the chaos suite's web server (``runserver``): the workers' settings, and
no persistent database connections.

``runserver`` serves each request on a thread of its own and never closes
the thread's connection (Django's docs: the development server "creates a
new thread for each request it handles, negating the effect of persistent
connections"); with the example project's ``CONN_MAX_AGE = 60`` each
request's connection stays open until the garbage collector finds it: 64
clients at once took 195 of 200 connection slots. With 0, each request's
connection closes at its end.
"""

from __future__ import annotations

from tests.chaos.settings import *  # noqa: F403

DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
