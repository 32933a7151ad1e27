"""The connections a worker thread's receivers open on databases other than the queue's.

The completer, the maintenance thread and the scheduler send signals on
their own thread (``job_finished``, ``job_dead``, the Tasks backend's
``task_finished``): a receiver that reads or writes the project's data
opens that thread's connection to the project's database. Where the queue
is on that database it is the thread's own connection, closed after a
connection error and when the thread ends. With the queue on a database of
its own (``DURABLE_JOBS["DATABASE"]``) nothing did either: once the server
dropped it, every receiver on that thread failed ("the connection is
closed") until the worker restarted. Handler threads need none of this:
``close_old_connections()`` before each job and ``close_all()`` at their
end cover every database.
"""

from __future__ import annotations

from django.db import connections


def refresh(queue_alias: str) -> None:
    """Drop this thread's broken or expired connections to the other databases.

    What Django does before a request (``close_old_connections``), but not
    for ``queue_alias``: the thread manages that one itself, and with the
    default ``CONN_MAX_AGE`` of 0 this would close it every round. Call it
    where no atomic block of the thread is open, before receivers run.
    """
    for connection in connections.all(initialized_only=True):
        if connection.alias != queue_alias:
            connection.close_if_unusable_or_obsolete()
