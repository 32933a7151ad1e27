"""A URLconf that cannot be imported: what a worker must not need."""

from __future__ import annotations

raise ImportError("this URLconf is broken on purpose (tests.testapp.broken_urls)")
