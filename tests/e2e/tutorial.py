"""Runs docs/tutorial.md as written: its files, its commands, and the outputs it shows.

The tutorial's blocks are read in order. A ``<!-- tutorial-test: ... -->``
comment just before a block (invisible on the site) says what to do with it:

- ``file PATH`` / ``append PATH``: write (or append) the block to PATH;
- ``skip``: not run (installing into a new virtual environment: the suite
  already runs in one with the package installed);
- ``background NAME``: a console block whose one command keeps running (a
  server, a worker), started as NAME; the lines shown must appear in its
  output;
- ``log NAME``: the lines shown must appear in NAME's output;
- ``stop NAME``: once no job is pending or running, SIGTERM to NAME; the lines
  shown must appear in what it logs until it exits;
- ``admin`` before a list: logged in as the superuser the tutorial created
  (with the password it gave), the admin index's "Durable jobs" section
  lists exactly the entries the list names in bold; then the dead job is
  requeued with the Dead jobs list's action, and the queue left to settle.

Any other console block is run one command at a time (``$ `` or ``(venv) $ ``
prompts; a trailing backslash continues a command), each output compared
with the lines shown under it, in order. A ``python`` block without a
comment is an illustration and is not run.

Placeholders in the outputs shown (``PLACEHOLDERS``): ``...`` stands for any
text, and a line of only ``...`` for any lines; a UUID, a log line's time, an
ISO time, a worker id, a duration and a retry delay stand for any such
value. The same UUID shown twice must be the same job both times (a UUID
in a command is replaced by the one it stood for). A background process's
lines may come in any order (jobs run side by side).

Where the test cannot do what the reader does, it does the nearest thing:
``createdb`` makes a database of its own on the test server (and the
settings' ``DATABASES`` are pointed at it), ``curl`` is sent from Python,
``runserver`` runs with ``--noreload`` on a free port (``:8000`` in a URL
is that port), and processes write unbuffered, as they would to a terminal.
"""

from __future__ import annotations

import base64
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

DIRECTIVE = re.compile(r"<!-- tutorial-test: (?P<verb>\w+)(?: (?P<arg>\S+))? -->")
FENCE = re.compile(r"^```(?P<lang>\w*)$")
PROMPT = re.compile(r"^(?:\(venv\) )?\$ (?P<command>.*)$")

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)"
#: What stands for a value that differs on each run: (what the docs show, what it matches).
PLACEHOLDERS = [
    (r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"),
    (ISO, ISO),
    (r"worker=[\w.-]+:\d+:[0-9a-f]+", r"worker=[\w.-]+:\d+:[0-9a-f]+"),
    (r"duration=\d+\.\d+", r"duration=\d+\.\d+"),
    (r"in=\d+\.\d+s", r"in=\d+\.\d+s"),
]
TOKEN = re.compile("|".join(f"(?P<p{i}>{shown})" for i, (shown, _) in enumerate(PLACEHOLDERS)))


@dataclass
class Block:
    lang: str
    lines: list[str]
    directive: tuple[str, str] | None
    line_no: int


def blocks(markdown: str) -> list[Block]:
    """The fenced blocks of ``markdown``, each with the directive just before it."""
    found: list[Block] = []
    lines = markdown.splitlines()
    directive: tuple[str, str] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if m := DIRECTIVE.fullmatch(line.strip()):
            directive = (m["verb"], m["arg"] or "")
            if directive[0] == "admin":
                end = lines.index("", i + 1)
                found.append(Block("list", lines[i + 1 : end], directive, i + 1))
                directive, i = None, end
        elif m := FENCE.match(line):
            end = lines.index("```", i + 1)
            found.append(Block(m["lang"], lines[i + 1 : end], directive, i + 1))
            directive, i = None, end
        elif line.strip():
            directive = None
        i += 1
    return found


@dataclass
class Matcher:
    """Compares outputs with the ones shown; remembers which real UUID each shown one is."""

    uuids: dict[str, str] = field(default_factory=dict)

    def pattern(self, shown: str) -> str:
        out, pos, seen = [], 0, set()
        for m in re.finditer(rf"{UUID}|\.\.\.|{TOKEN.pattern}", shown):
            out.append(re.escape(shown[pos : m.start()]))
            text = m.group()
            if text == "...":
                out.append(".*?")
            elif re.fullmatch(UUID, text):
                name = f"u{text.replace('-', '')}"
                if text in self.uuids:
                    out.append(re.escape(self.uuids[text]))
                elif name in seen:
                    out.append(f"(?P={name})")
                else:
                    out.append(f"(?P<{name}>{UUID})")
                    seen.add(name)
            else:
                index = next(int(k[1:]) for k, v in m.groupdict().items() if v and k[0] == "p")
                out.append(PLACEHOLDERS[index][1])
            pos = m.end()
        out.append(re.escape(shown[pos:]))
        return "".join(out)

    def line(self, shown: str, actual: str) -> bool:
        # A terminal shows no trailing blanks (nor does the page).
        m = re.fullmatch(self.pattern(shown.rstrip()), actual.rstrip())
        if m is None:
            return False
        for name, value in m.groupdict().items():
            if name.startswith("u"):
                original = f"{name[1:9]}-{name[9:13]}-{name[13:17]}-{name[17:21]}-{name[21:]}"
                if value in self.uuids.values() and self.uuids.get(original) != value:
                    return False  # two UUIDs shown, one real one
                self.uuids[original] = value
        return True

    def in_order(self, shown: list[str], actual: list[str]) -> bool:
        """``shown`` against ``actual`` line by line; a ``...`` line skips any lines."""
        if not shown:
            return not actual
        if shown[0] == "...":
            return any(self.in_order(shown[1:], actual[i:]) for i in range(len(actual) + 1))
        saved = dict(self.uuids)
        if actual and self.line(shown[0], actual[0]) and self.in_order(shown[1:], actual[1:]):
            return True
        self.uuids = saved
        return False

    def unmatched(self, shown: list[str], actual: list[str], used: set[int]) -> list[str]:
        """The lines of ``shown`` no unused line of ``actual`` matches, in any order."""
        missing = []
        for want in shown:
            if want == "...":
                continue
            hit = next(
                (i for i, got in enumerate(actual) if i not in used and self.line(want, got)), None
            )
            if hit is None:
                missing.append(want)
            else:
                used.add(hit)
        return missing

    def command(self, text: str) -> str:
        """``text`` with each UUID shown replaced by the real one it stood for."""
        return re.sub(UUID, lambda m: self.uuids.get(m.group(), m.group()), text)


def commands(lines: list[str]) -> list[tuple[str, list[str]]]:
    """A console block's commands, each with the output lines shown under it."""
    found: list[tuple[str, list[str]]] = []
    continued = False
    for line in lines:
        if continued:
            command, output = found[-1]
            found[-1] = (command + " " + line.strip().removesuffix("\\").strip(), output)
        elif m := PROMPT.match(line):
            found.append((m["command"].removesuffix("\\").strip(), []))
        else:
            found[-1][1].append(line)
        continued = line.endswith("\\")
    for _, output in found:
        while output and not output[-1].strip():  # a blank line before the next prompt
            output.pop()
    return found


def curl(argv: list[str], port: int) -> str:
    """What ``curl -s [-i] [-u user:password] [-X METHOD] [-H header] [-d data] URL`` prints."""
    headers: dict[str, str] = {}
    method, data, show_headers, url = None, None, False, ""
    args = iter(argv[1:])
    for arg in args:
        if arg == "-s":
            continue
        if arg == "-i":
            show_headers = True
        elif arg == "-u":
            headers["Authorization"] = "Basic " + base64.b64encode(next(args).encode()).decode()
        elif arg == "-X":
            method = next(args)
        elif arg == "-H":
            name, _, value = next(args).partition(": ")
            headers[name] = value
        elif arg == "-d":
            data = next(args).encode()
            headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
        else:
            url = arg.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    assert url.startswith(f"http://127.0.0.1:{port}/"), url  # the tutorial's own server only
    request = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310
    try:
        response = urllib.request.urlopen(request, timeout=30)  # noqa: S310 (a local server)
    except urllib.error.HTTPError as error:
        response = error
    body = response.read().decode()
    if not show_headers:
        return body
    head = [f"HTTP/1.1 {response.status} {response.reason}"]
    head += [f"{name}: {value}" for name, value in response.headers.items()]
    return "\n".join([*head, "", body])


@dataclass
class Background:
    proc: subprocess.Popen[bytes]
    log: Path
    used: set[int] = field(default_factory=set)

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()


class Tutorial:
    """Runs the blocks of one tutorial in ``workdir``; ``settle`` waits for an idle queue."""

    def __init__(
        self,
        workdir: Path,
        env: dict[str, str],
        port: int,
        createdb: Callable[[], None],
        database_settings: str,
        settle: Callable[[], None],
    ) -> None:
        self.cwd = workdir
        self.env = env
        self.port = port
        self.createdb = createdb
        self.database_settings = database_settings
        self.settle = settle
        self.match = Matcher()
        self.background: dict[str, Background] = {}
        self.variables: dict[str, str] = {}

    def run(self, markdown: str) -> None:
        for block in blocks(markdown):
            verb, arg = block.directive or ("", "")
            where = f"docs/tutorial.md:{block.line_no}"
            if verb == "skip" or (block.lang != "console" and not verb):
                continue
            if verb in {"file", "append"}:
                self.write(Path(arg), block.lines, append=verb == "append")
            elif verb == "background":
                ((command, shown),) = commands(block.lines)
                self.start(arg, command)
                self.expect(arg, shown, where)
            elif verb == "admin":
                self.admin_index(block.lines, where)
            elif verb == "log":
                self.expect(arg, block.lines, where)
            elif verb == "stop":
                self.settle()
                self.background[arg].proc.terminate()
                assert self.background[arg].proc.wait(60) == 0, self.background[arg].log.read_text()
                self.expect(arg, block.lines, where, timeout=0)
            else:
                for command, shown in commands(block.lines):
                    self.execute(command, shown, where)

    def write(self, path: Path, lines: list[str], *, append: bool) -> None:
        target = self.cwd / path
        text = "\n".join(lines) + "\n"
        if path.name == "settings.py":
            text += self.database_settings
        with target.open("a" if append else "w") as out:
            out.write(("\n" if append else "") + text)

    def argv(self, command: str) -> list[str]:
        argv = shlex.split(self.match.command(command))
        while re.fullmatch(r"[A-Z_]+=.*", argv[0]):  # VARIABLE=value command
            name, _, value = argv.pop(0).partition("=")
            self.variables[name] = value
        return [sys.executable if argv[0] == "python" else argv[0], *argv[1:]]

    def environment(self) -> dict[str, str]:
        return {**self.env, **self.variables}

    def admin_index(self, shown: list[str], where: str) -> None:
        """The admin index's "Durable jobs" entries, as the superuser sees them."""
        base = f"http://127.0.0.1:{self.port}/admin/"
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        page = opener.open(f"{base}login/", timeout=30).read().decode()
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert token, page
        form = {
            "csrfmiddlewaretoken": token[1],
            "username": "admin",
            "password": self.variables["DJANGO_SUPERUSER_PASSWORD"],
            "next": "/admin/",
        }
        data = urllib.parse.urlencode(form).encode()
        index = opener.open(f"{base}login/?next=/admin/", data, timeout=30).read().decode()
        section = re.search(r'class="app-durable_jobs module.*?</table>', index, re.S)
        assert section, f"{where}: no Durable jobs section in the admin (not logged in?)"
        listed = re.findall(r'<th scope="row"[^>]*>\s*<a href="[^"]*"[^>]*>([^<]+)</a>', section[0])
        named = re.findall(r"^- \*\*([^*]+)\*\*", "\n".join(shown), re.M)
        assert sorted(listed) == sorted(named), f"{where}: the admin lists {listed}, not {named}"
        # "Select the dead job, choose Requeue selected jobs ... and click Go".
        dead_jobs = f"{base}durable_jobs/deadjob/"
        page = opener.open(dead_jobs, timeout=30).read().decode()
        selected = re.findall(r'name="_selected_action" value="([^"]+)"', page)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert len(selected) == 1 and token, f"{where}: one dead job expected:\n{page}"
        form = {"csrfmiddlewaretoken": token[1], "action": "requeue_jobs", "index": "0"}
        data = urllib.parse.urlencode({**form, "_selected_action": selected[0]}).encode()
        done = opener.open(dead_jobs, data, timeout=30).read().decode()
        assert "requeued" in done, f"{where}: the requeue action did not answer:\n{done}"
        self.settle()  # it runs its three attempts again, and is dead again

    def execute(self, command: str, shown: list[str], where: str) -> None:
        argv = self.argv(command)
        if argv[0] == "cd":
            self.cwd = self.cwd / argv[1]
            return
        if argv[0] == "createdb":
            self.createdb()
            return
        if argv[0] == "curl":
            output = curl(argv, self.port)
        else:
            done = subprocess.run(
                argv,
                cwd=self.cwd,
                env=self.environment(),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, f"{where}: {command}\n{done.stdout}{done.stderr}"
            output = done.stdout
        actual = output.rstrip("\n").splitlines()
        assert self.match.in_order(shown, actual), (
            f"{where}: {command}\nshown:\n" + "\n".join(shown) + "\nactual:\n" + output
        )

    def start(self, name: str, command: str) -> None:
        argv = self.argv(command)
        if argv[1:3] == ["manage.py", "runserver"]:
            argv += [f"127.0.0.1:{self.port}", "--noreload"]
        log = self.cwd / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv, cwd=self.cwd, env=self.environment(), stdout=out, stderr=subprocess.STDOUT
            )
        self.background[name] = Background(proc, log)
        if "runserver" in argv:
            self.wait_for_port(proc, log)

    def wait_for_port(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"runserver did not start:\n{log.read_text()}") from None
                time.sleep(0.1)

    def expect(self, name: str, shown: list[str], where: str, timeout: float = 60) -> None:
        """Wait until every line shown is in ``name``'s output (each line used once)."""
        running = self.background[name]
        deadline = time.monotonic() + timeout
        while True:
            used = set(running.used)
            saved = dict(self.match.uuids)
            missing = self.match.unmatched(shown, running.lines(), used)
            if not missing:
                running.used = used
                return
            self.match.uuids = saved
            if time.monotonic() >= deadline or (running.proc.poll() is not None and timeout):
                raise AssertionError(
                    f"{where}: not in the output of {name}:\n"
                    + "\n".join(missing)
                    + "\noutput:\n"
                    + running.log.read_text()
                )
            time.sleep(0.1)

    def close(self) -> None:
        for running in self.background.values():
            if running.proc.poll() is None:
                running.proc.kill()
                running.proc.wait(10)
