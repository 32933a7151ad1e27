"""A URLconf that cannot be imported: what a worker must not need."""

raise ImportError("this URLconf is broken on purpose (tests.testapp.broken_urls)")
