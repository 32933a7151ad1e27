"""The example project's web tier for the chaos suite: ``runserver`` on a scenario's database.

Threaded (a thread per request), with ``tests/chaos/web_settings.py`` (no
persistent connections: see there). Its log, with the traceback of any 500,
is in the scenario's ``tmp_path``.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from pathlib import Path

from tests.ports import free_port

from .fleet import MANAGE, ROOT, wait_until
from .scenario import Database, process_env

SETTINGS = "tests.chaos.web_settings"


class Server:
    """``manage.py runserver`` on the scenario's database, as the web tier."""

    def __init__(self, database: Database, log: Path) -> None:
        self.port = free_port()
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(MANAGE), "runserver", f"127.0.0.1:{self.port}",
                 "--noreload", "--skip-checks"],
                cwd=ROOT, env=process_env(database.url, DJANGO_SETTINGS_MODULE=SETTINGS),
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.log = log

    def request(
        self, method: str, path: str, body: object = None, token: str = ""
    ) -> tuple[int, dict[str, object]]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            headers = {"Content-Type": "application/json"}
            if token:
                headers["Authorization"] = f"Token {token}"
            conn.request(method, path, json.dumps(body) if body is not None else None, headers)
            response = conn.getresponse()
            text = response.read()
            try:
                return response.status, json.loads(text) if text else {}
            except ValueError:  # not JSON: an error page, which the API must never answer
                return response.status, {"body": text[:300].decode(errors="replace")}
        finally:
            conn.close()

    def wait_up(self) -> None:
        def up() -> bool:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                return self.request("GET", "/api/health")[0] == 200
            except OSError:
                return False

        wait_until(up, 60, "the web server to answer", self.log.read_text)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
