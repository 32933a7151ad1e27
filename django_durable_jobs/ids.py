"""Job ids: UUIDs whose first 48 bits are the creation time (RFC 9562 version 7).

The primary key's B-tree takes every new job: with random (version 4) ids
each insert lands on a random leaf page, and once the index outgrows
PostgreSQL's shared buffers most inserts (and the claim's and completion's
new index entries) read a page back first. Measured with 10,000,000
finished jobs in the table: 11 % fewer jobs per second than on an empty
table with version 4 ids (``docs/benchmarks.md``). Ids that grow with time
keep the inserts on the index's right edge, as a serial key would, while
staying unguessable (74 random bits) and unique across hosts without
coordination. Ids stay plain UUIDs: nothing reads the time back from them.
Within a process they only increase, even within one millisecond.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

_VERSION = 0x7 << 76
_VARIANT = 0x2 << 62
_RANDOM_BITS = 74
_RANDOM_MAX = (1 << _RANDOM_BITS) - 1
_RAND_B_BITS = 62

# The last id made in this process, as (milliseconds, random bits): ids
# made in one millisecond still come out in order (RFC 9562, 6.2, method 2:
# the random bits of a later id are the earlier one's plus a random step).
# An enqueue locks its parents in id order, and a worker ending a parent
# locks the parent, then its children: a child whose id sorted before its
# parent's (both made in one millisecond, as chain() makes them) could
# deadlock an enqueue naming both with the parent's completion.
_last = (0, 0)
_lock = threading.Lock()


def new_job_id() -> uuid.UUID:
    """A version 7 UUID: milliseconds since the epoch, then random bits; increasing
    within the process."""
    global _last
    milliseconds = time.time_ns() // 1_000_000
    random_bits = int.from_bytes(os.urandom(10), "big") & _RANDOM_MAX
    with _lock:
        last_ms, last_bits = _last
        if milliseconds <= last_ms:
            # The same millisecond (or the clock went back): after the last
            # id, by a random step of up to 32 bits, keeping most of the
            # randomness; an overflow moves to the next millisecond.
            milliseconds = last_ms
            random_bits = last_bits + 1 + (random_bits >> (_RANDOM_BITS - 32))
            if random_bits > _RANDOM_MAX:
                milliseconds, random_bits = last_ms + 1, random_bits & _RANDOM_MAX
        _last = (milliseconds, random_bits)
    rand_a = random_bits >> _RAND_B_BITS
    rand_b = random_bits & ((1 << _RAND_B_BITS) - 1)
    return uuid.UUID(int=(milliseconds << 80) | _VERSION | (rand_a << 64) | _VARIANT | rand_b)
