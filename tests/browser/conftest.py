"""Fixtures of the browser tests: headless Chromium driven by Selenium against a live server.

Chromium and its driver come from the Debian packages ``chromium`` and
``chromium-driver`` (``/usr/bin/chromium``, ``/usr/bin/chromedriver``).
Where one is missing, or Chromium cannot start, every browser test skips
with a message that says what to install; with
``DURABLE_JOBS_REQUIRE_BROWSER=1`` (set by ``.ci/run`` once it has
installed them) that is a failure instead, so CI cannot pass by skipping.

One browser serves all the browser tests (starting Chromium takes about
two seconds); each test gets it with no cookies and logs in through the admin's
real login form. The server is pytest-django's ``live_server``, in a thread
of this process, on the test database (each test that uses it is
transactional, so the server's own connections see what the test wrote).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest
from django.contrib.auth.models import User

if TYPE_CHECKING:
    from .demo import DemoState
    from .pages import AdminPages

#: A fixed window, so pages lay out (and screenshots come out) the same everywhere.
WINDOW_SIZE = (1600, 1000)
#: Implicit wait for find_element: short; anything that changes gets a WebDriverWait.
IMPLICIT_WAIT_SECONDS = 0.5
PAGE_LOAD_TIMEOUT_SECONDS = 30
#: Where screenshots go when set (relative to the repository root), else tmp_path.
SCREENSHOTS_ENV = "DURABLE_JOBS_SCREENSHOTS"
#: "1": a browser that cannot start fails the tests instead of skipping them (CI).
REQUIRE_ENV = "DURABLE_JOBS_REQUIRE_BROWSER"

# (program, Debian package): looked up on PATH, then where Debian puts it.
BINARIES = {"chromium": "chromium", "chromedriver": "chromium-driver"}


def _unavailable(reason: str) -> NoReturn:
    """Skip (or, under ``DURABLE_JOBS_REQUIRE_BROWSER=1``, fail) every browser test."""
    message = f"browser tests skipped: {reason}"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
    pytest.skip(message)


def _find(program: str) -> str | None:
    found = shutil.which(program)
    if found:
        return found
    fallback = Path("/usr/bin", program)
    return str(fallback) if fallback.is_file() and os.access(fallback, os.X_OK) else None


@pytest.fixture(scope="session")
def browser_binaries() -> dict[str, str]:
    """The paths of chromium and chromedriver; a skip naming the missing package."""
    found: dict[str, str] = {}
    for program, package in BINARIES.items():
        path = _find(program)
        if path is None:
            _unavailable(
                f"{program} not found: install the Debian package '{package}' "
                "(apt-get install chromium chromium-driver)"
            )
        found[program] = path
    return found


def chrome_options(binary: str) -> Any:
    from selenium.webdriver import ChromeOptions

    options = ChromeOptions()
    options.binary_location = binary
    options.add_argument("--headless=new")
    options.add_argument(f"--window-size={WINDOW_SIZE[0]},{WINDOW_SIZE[1]}")
    # Containers often have a small /dev/shm, where Chromium crashes.
    options.add_argument("--disable-dev-shm-usage")
    options.add_argument("--disable-gpu")
    options.add_argument("--no-first-run")
    options.add_argument("--lang=en-US")
    options.add_argument("--hide-scrollbars")
    # Chromium refuses to run as root inside its sandbox; a normal user keeps it.
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        options.add_argument("--no-sandbox")
    return options


@pytest.fixture(scope="package")
def driver(browser_binaries: dict[str, str], server: Any) -> Iterator[Any]:
    """One headless Chromium for the browser tests, through the Debian chromedriver.

    The driver's path is given, so Selenium Manager never runs (it would
    download a driver from the network). It quits after the last browser
    test, and then waits for the server's threads that answered its
    keep-alive connections: each holds database connections until the
    browser hangs up, and the rest of the suite (or the ``DROP DATABASE``
    at its end) should not find them open.
    """
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    service = Service(executable_path=browser_binaries["chromedriver"])
    try:
        browser = webdriver.Chrome(
            options=chrome_options(browser_binaries["chromium"]), service=service
        )
    except WebDriverException as exc:
        first_line = (exc.msg or str(exc)).strip().splitlines()[0]
        _unavailable(f"Chromium did not start: {first_line}")
    browser.implicitly_wait(IMPLICIT_WAIT_SECONDS)
    browser.set_page_load_timeout(PAGE_LOAD_TIMEOUT_SECONDS)
    try:
        yield browser
    finally:
        browser.quit()
        for thread in threading.enumerate():
            if "process_request_thread" in thread.name:
                thread.join(timeout=10)


@pytest.fixture(scope="session")
def server(django_db_setup: None, live_server: Any) -> Any:
    """pytest-django's ``live_server``, started after the test database is made.

    So it also stops before the database is dropped (fixtures are torn down
    in the reverse order of their setup).
    """
    return live_server


@pytest.fixture
def superuser(transactional_db: None) -> User:
    from .demo import SUPERUSER

    username, password = SUPERUSER
    return User.objects.create_superuser(username, f"{username}@example.com", password)


@pytest.fixture
def pages(driver: Any, server: Any, superuser: User) -> AdminPages:
    """The admin in the browser, not logged in yet (no cookies from an earlier test)."""
    from .pages import AdminPages

    driver.delete_all_cookies()
    return AdminPages(driver, server.url)


@pytest.fixture
def admin_pages(pages: AdminPages) -> AdminPages:
    """The admin in the browser, logged in as the superuser through the login form."""
    from .demo import SUPERUSER

    pages.log_in(*SUPERUSER)
    pages.collapse_nav_sidebar()  # room for the columns (and in the screenshots)
    return pages


@pytest.fixture
def demo(clean_registry: None, transactional_db: None) -> DemoState:
    """Queues, finished, pending and dead jobs (real tracebacks), a paused queue."""
    from .demo import build_demo_state

    return build_demo_state()


@pytest.fixture
def screenshot(
    driver: Any, request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[[str], Path]:
    """``screenshot("queues")`` saves the window as ``queues.png``.

    Into ``$DURABLE_JOBS_SCREENSHOTS`` when set (the docs' images:
    ``DURABLE_JOBS_SCREENSHOTS=docs/images/admin``), else the test's tmp_path.
    """
    configured = os.environ.get(SCREENSHOTS_ENV)
    if configured:
        directory = Path(configured)
        if not directory.is_absolute():
            directory = request.config.rootpath / directory
        directory.mkdir(parents=True, exist_ok=True)
    else:
        directory = tmp_path

    def save(name: str) -> Path:
        path = directory / f"{name}.png"
        assert driver.save_screenshot(str(path)), f"could not save {path}"
        return path

    return save
