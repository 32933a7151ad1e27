"""A real PgBouncer in transaction mode, in front of the tests' PostgreSQL.

From the Debian package ``pgbouncer`` (``/usr/sbin/pgbouncer``), started
with an ini file of its own in a temporary directory: on 127.0.0.1, a free
port, no Unix socket, ``auth_type = trust``, every database passed through
to the upstream server (``*``), plus ``<name>_single``, the same database
through a pool of one server connection (what one client leaves on a server
connection, the next one gets). PgBouncer refuses to run as root; as root,
it is started with ``-u`` and a user that is not (``postgres``, else
``nobody``).

Used by ``tests/e2e/test_pgbouncer.py`` through the ``pgbouncer`` fixture
(``tests/e2e/conftest.py``) and by ``benchmarks/pooler_latency.py``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from tests.ports import free_port

#: The Debian package that has the binary; named by every skip.
PACKAGE = "pgbouncer"
#: Where the package puts the binary (not on a non-root user's PATH).
DEBIAN_BINARY = Path("/usr/sbin/pgbouncer")
#: Server connections per database and user (a worker uses 4 + concurrency clients).
POOL_SIZE = 20


def find_binary() -> str | None:
    found = shutil.which("pgbouncer")
    if found:
        return found
    if DEBIAN_BINARY.is_file() and os.access(DEBIAN_BINARY, os.X_OK):
        return str(DEBIAN_BINARY)
    return None


def _unprivileged_user() -> str:
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise RuntimeError("PgBouncer must not run as root, and neither postgres nor nobody exists")


class PgBouncer:
    """One PgBouncer process; ``start()``, then ``url(dbname)``, ``admin(...)``, ``stop()``."""

    def __init__(
        self,
        binary: str,
        *,
        host: str,
        port: int,
        user: str,
        password: str = "",
        single: str | None = None,
    ) -> None:
        self.binary = binary
        self.upstream = (host or "127.0.0.1", port or 5432)
        self.user = user or "postgres"
        self.password = password
        self.single = single
        self.port = 0
        self.dir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    # -- lifecycle -------------------------------------------------------------

    def start(self, timeout: float = 15.0) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="durable-jobs-pgbouncer-"))
        # Readable by the unprivileged user PgBouncer switches to.
        self.dir.chmod(0o755)
        self.port = free_port()
        ini = self.dir / "pgbouncer.ini"
        userlist = self.dir / "userlist.txt"
        userlist.write_text(f'"{self.user}" ""\n')
        ini.write_text(self._ini(userlist))
        for path in (ini, userlist):
            path.chmod(0o644)
        command = [self.binary]
        if os.geteuid() == 0:
            command += ["-u", _unprivileged_user()]
        command.append(str(ini))
        with open(self.dir / "pgbouncer.log", "wb") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with {self.proc.returncode}: {self.log()}")
            try:
                with psycopg.connect(self.url("pgbouncer"), autocommit=True) as conn:
                    conn.execute("SHOW VERSION")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"pgbouncer did not answer: {self.log()}") from None
                time.sleep(0.05)

    def _ini(self, userlist: Path) -> str:
        host, port = self.upstream
        server = f"host={host} port={port} user={self.user}"
        if self.password:
            server += f" password={self.password}"
        databases = [f"* = {server}"]
        if self.single:
            databases.append(f"{self.single}_single = {server} dbname={self.single} pool_size=1")
        return "\n".join(
            [
                "[databases]",
                *databases,
                "",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {self.port}",
                "unix_socket_dir =",
                "auth_type = trust",
                f"auth_file = {userlist}",
                f"admin_users = {self.user}",
                "pool_mode = transaction",
                f"default_pool_size = {POOL_SIZE}",
                "max_client_conn = 1000",
                # Idle server connections go soon: they would keep the test
                # database from being dropped, and show in pg_stat_activity.
                "server_idle_timeout = 5",
                "ignore_startup_parameters = extra_float_digits",
                "",
            ]
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # SIGTERM: shut down at once, closing every server connection.
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    # -- use -------------------------------------------------------------------

    def url(self, dbname: str) -> str:
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{dbname}"

    def admin(self, command: str) -> list[dict[str, object]]:
        """Run a command of PgBouncer's admin console (``SHOW STATS``, ``KILL db``...)."""
        with psycopg.connect(self.url("pgbouncer"), autocommit=True) as conn:
            cursor = conn.execute(command)
            if cursor.description is None:
                return []
            names = [column.name for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def transactions(self, dbname: str) -> int:
        """Transactions PgBouncer has passed to ``dbname`` so far."""
        for row in self.admin("SHOW STATS"):
            if row["database"] == dbname:
                return int(row["total_xact_count"])  # type: ignore[call-overload]
        return 0

    def drop_connections(self, dbname: str) -> None:
        """Close every client and server connection to ``dbname``; new ones work again."""
        self.admin(f"KILL {dbname}")
        self.admin(f"RESUME {dbname}")

    def version(self) -> str:
        (row,) = self.admin("SHOW VERSION")
        return str(next(iter(row.values())))

    def log(self) -> str:
        if self.dir is None or not (self.dir / "pgbouncer.log").exists():
            return ""
        return (self.dir / "pgbouncer.log").read_text(errors="replace")
