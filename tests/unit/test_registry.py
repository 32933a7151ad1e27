from __future__ import annotations

import pytest

from django_durable_jobs import HandlerAlreadyRegistered, InvalidJob, job
from django_durable_jobs.registry import Handler, registry


def test_job_registers_the_function_unchanged(clean_registry: None) -> None:
    def send(ctx: object) -> str:
        return "sent"

    decorated = job("unit.send", queue="emails", max_attempts=8)(send)
    assert decorated is send
    handler = registry.get("unit.send")
    assert handler is not None
    assert (handler.func, handler.queue, handler.max_attempts) == (send, "emails", 8)
    assert "unit.send" in registry


def test_bare_decorator_names_the_type_after_the_function(clean_registry: None) -> None:
    @job
    def cleanup(ctx: object) -> None: ...

    name = f"{__name__}.test_bare_decorator_names_the_type_after_the_function.<locals>.cleanup"
    assert registry.get(name) is not None


def test_registering_a_name_twice_names_both_places(clean_registry: None) -> None:
    @job("unit.twice")
    def first(ctx: object) -> None: ...

    with pytest.raises(HandlerAlreadyRegistered) as excinfo:

        @job("unit.twice")
        def second(ctx: object) -> None: ...

    message = str(excinfo.value)
    assert "'unit.twice'" in message
    assert "first" in message
    assert "second" in message
    assert "test_registry.py:" in message  # file and line of each
    assert registry.get("unit.twice").func is first  # type: ignore[union-attr]


def test_reimporting_the_same_definition_is_not_a_conflict(clean_registry: None) -> None:
    def make() -> object:
        def handler(ctx: object) -> None: ...

        return handler

    registry.register(Handler("unit.reimport", make()))  # type: ignore[arg-type]
    registry.register(Handler("unit.reimport", make()))  # type: ignore[arg-type]
    assert len([h for h in registry if h.name == "unit.reimport"]) == 1


@pytest.mark.parametrize(
    "kwargs",
    [{"queue": "bad queue"}, {"max_attempts": 0}, {"priority": "high"}],
)
def test_bad_handler_options_fail_at_decoration(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidJob):
        job("unit.bad", **kwargs)  # type: ignore[arg-type]


def test_example_handlers_are_autodiscovered() -> None:
    names = {h.name for h in registry}
    assert {
        "example.noop",
        "example.echo",
        "example.sleep",
        "example.fail",
        "example.flaky",
        "example.cancellable",
        "example.asleep",
        "example.anoop",
    } <= names
    assert registry.get("example.asleep").is_async  # type: ignore[union-attr]
    assert not registry.get("example.sleep").is_async  # type: ignore[union-attr]
