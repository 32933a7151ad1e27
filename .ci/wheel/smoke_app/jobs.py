"""Found by the app's autodiscovery of each installed app's ``jobs`` module."""

from __future__ import annotations

from typing import Any

from django_durable_jobs import job


@job("smoke.echo")
def echo(ctx: Any) -> dict[str, Any]:
    return dict(ctx.payload)
