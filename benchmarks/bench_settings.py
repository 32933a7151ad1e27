"""Settings for benchmarks/worker.py: the example project's, with quiet workers.

The example settings log ``django_durable_jobs`` at INFO to the console: one
line per job, which would cost more than a no-op job itself. Benchmarks log
WARNING and above only. Used as ``DJANGO_SETTINGS_MODULE=bench_settings``
with ``benchmarks/`` on ``PYTHONPATH`` (the worker script does this).
"""

from __future__ import annotations

import copy
import json
import os

from example_project.settings import *  # noqa: F403
from example_project.settings import LOGGING as _EXAMPLE_LOGGING

DEBUG = False

LOGGING = copy.deepcopy(_EXAMPLE_LOGGING)
LOGGING["loggers"]["django_durable_jobs"]["level"] = "WARNING"

# The engine's own numbers: no queue limits (the example's "throttled" and
# "narrow" queues would add their claims to every round). BENCH_QUEUES, a
# JSON object, sets DURABLE_JOBS["QUEUES"] instead (the flow-control runs).
DURABLE_JOBS = {
    **{key: value for key, value in DURABLE_JOBS.items() if key != "QUEUES"},  # noqa: F405
    "QUEUES": json.loads(os.environ.get("BENCH_QUEUES", "{}")),
}

# BENCH_NOTIFY_FINISHED=0 turns NOTIFY_FINISHED off: whether the outcomes'
# NOTIFY of finished jobs (for wait()) costs the workers' commits (issue 26).
if os.environ.get("BENCH_NOTIFY_FINISHED") == "0":
    DURABLE_JOBS["NOTIFY_FINISHED"] = False

# BENCH_RETENTION, a JSON object, sets DURABLE_JOBS["RETENTION"] (benchmarks/soak.py:
# finished jobs kept a minute, the workers' pruning running throughout).
if os.environ.get("BENCH_RETENTION"):
    DURABLE_JOBS["RETENTION"] = json.loads(os.environ["BENCH_RETENTION"])
# BENCH_HISTORY_PARTITION sets DURABLE_JOBS["HISTORY_PARTITION"] (soak.py: ranges of a minute).
if os.environ.get("BENCH_HISTORY_PARTITION"):
    DURABLE_JOBS["HISTORY_PARTITION"] = os.environ["BENCH_HISTORY_PARTITION"]

# BENCH_PREPARE_STATEMENTS=1 or 0 sets PREPARE_STATEMENTS (issue 26): the
# worker's statements prepared or not, on the same tree (benchmarks/prepare_ab.py).
if os.environ.get("BENCH_PREPARE_STATEMENTS") in ("0", "1"):
    DURABLE_JOBS["PREPARE_STATEMENTS"] = os.environ["BENCH_PREPARE_STATEMENTS"] == "1"
