"""Unit tests for parse_database_url: the one place a DATABASE_URL becomes Django settings.

They need no database: a wrong parse shows up later as a confusing connection error (or a
password in a log), so the parsing rules are pinned here.
"""

from __future__ import annotations

import pytest
from embedded_postgres import parse_database_url


def test_tcp_url() -> None:
    db = parse_database_url("postgres://jobs:s3cret@db.example.com:6543/durable")
    assert db == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "durable",
        "USER": "jobs",
        "PASSWORD": "s3cret",
        "HOST": "db.example.com",
        "PORT": "6543",
        "OPTIONS": {},
    }


@pytest.mark.parametrize("scheme", ["postgres", "postgresql", "pgsql", "PostgreSQL"])
def test_accepted_schemes(scheme: str) -> None:
    assert parse_database_url(f"{scheme}://u@h/n")["NAME"] == "n"


def test_no_port_no_password() -> None:
    db = parse_database_url("postgresql://jobs@localhost/durable")
    assert (db["USER"], db["PASSWORD"], db["HOST"], db["PORT"]) == ("jobs", "", "localhost", "")


def test_percent_decoding_of_every_part() -> None:
    db = parse_database_url("postgres://j%40b:p%3Aw%2Fd%40@h/my%20db")
    assert (db["USER"], db["PASSWORD"], db["NAME"]) == ("j@b", "p:w/d@", "my db")


def test_percent_encoded_host_is_a_socket_directory() -> None:
    db = parse_database_url("postgres://postgres@%2Ftmp%2FSock%20Dir:5432/postgres")
    # Case kept: it is a path, not a host name (S108: a string compared, no file made).
    assert db["HOST"] == "/tmp/Sock Dir"  # noqa: S108
    assert db["PORT"] == "5432"


def test_host_query_parameter_overrides_host() -> None:
    db = parse_database_url("postgresql://postgres@/postgres?host=/run/pg%20sock")
    assert db["HOST"] == "/run/pg sock"
    assert db["OPTIONS"] == {}
    db = parse_database_url("postgresql://postgres@ignored/postgres?host=/run/pg")
    assert db["HOST"] == "/run/pg"


def test_ipv6_host() -> None:
    db = parse_database_url("postgres://u@[::1]:5433/n")
    assert (db["HOST"], db["PORT"]) == ("::1", "5433")


def test_other_query_parameters_go_to_options() -> None:
    db = parse_database_url(
        "postgres://u@h/n?sslmode=require&application_name=durable%20worker&connect_timeout=5"
    )
    assert db["OPTIONS"] == {
        "sslmode": "require",
        "application_name": "durable worker",
        "connect_timeout": "5",
    }


def test_surrounding_whitespace_is_ignored() -> None:
    assert parse_database_url("  postgres://u@h/n\n")["NAME"] == "n"


@pytest.mark.parametrize(
    "url", ["mysql://u:pw@h/n", "sqlite:///db.sqlite3", "http://h/n", "h:5432/n"]
)
def test_bad_scheme(url: str) -> None:
    with pytest.raises(ValueError, match="scheme") as info:
        parse_database_url(url)
    assert "postgres://" in str(info.value)  # says what is expected


@pytest.mark.parametrize("url", ["postgres://u@h", "postgres://u@h/", "postgres://u@h/?sslmode=a"])
def test_missing_database_name(url: str) -> None:
    with pytest.raises(ValueError, match="no database name"):
        parse_database_url(url)


@pytest.mark.parametrize("url", ["", "   "])
def test_empty(url: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        parse_database_url(url)


def test_bad_port() -> None:
    with pytest.raises(ValueError, match="port that is not a number"):
        parse_database_url("postgres://u:pw@h:x1/n")


@pytest.mark.parametrize(
    "url",
    [
        "mysql://admin:Hunter2Secret@h/n",
        "postgres://admin:Hunter2Secret@h",
        "postgres://admin:Hunter2Secret@h:nope/n",
        "postgres://admin:Hunter2Secret@h/",
        "postgres://admin:Hunter2Secret/n",  # no "@host": the password looks like a port
    ],
)
def test_password_is_never_in_the_error(url: str) -> None:
    with pytest.raises(ValueError, match="DATABASE_URL") as info:
        parse_database_url(url)
    assert "Hunter2Secret" not in str(info.value)
    assert "Hunter2Secret" not in repr(info.value)


def test_errors_name_the_variable_the_url_came_from() -> None:
    with pytest.raises(ValueError, match=r"^DIRECT_DATABASE_URL has no database name"):
        parse_database_url("postgres://u@h/", "DIRECT_DATABASE_URL")
