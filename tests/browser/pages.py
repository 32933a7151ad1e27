"""The admin's pages as the browser tests use them: log in, open a page, run an action.

What a test does is written against these few methods, so that a change of
markup (a button on the job page instead of a list action, a confirmation
step) is a change here, not in every test. Every wait for something that
changes is an explicit ``WebDriverWait`` on what the page must show.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from selenium.common.exceptions import (
    NoAlertPresentException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait

from django_durable_jobs.models import Job

#: Generous: a shared CI machine can stall a page for seconds; passing is fast.
WAIT_SECONDS = 20

JOBS = "/admin/durable_jobs/job/"
DEAD_JOBS = "/admin/durable_jobs/deadjob/"
QUEUES = "/admin/durable_jobs/queuestate/"

#: The ``screenshot`` fixture (tests/browser/conftest.py): saves the window as NAME.png.
Screenshot = Callable[[str], Path]


def gone(element: WebElement) -> Callable[[Any], bool]:
    """A wait condition: ``element`` left the document (its page was replaced).

    Selenium's ``staleness_of`` expects a stale-element error; Chromium, asked
    about a node in the very moment its document is torn down, may answer
    "Node with given id does not belong to the document" instead, a plain
    ``WebDriverException`` (seen in CI): that also means the node is gone.
    """

    def check(_driver: Any) -> bool:
        try:
            element.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            if "does not belong to the document" in str(exc):
                return True
            raise
        return False

    return check


class AdminPages:
    def __init__(self, driver: Any, base_url: str) -> None:
        self.driver = driver
        self.base_url = base_url

    # -- navigation ---------------------------------------------------------

    def open(self, path: str) -> None:
        self.driver.get(f"{self.base_url}{path}")
        self.assert_no_alert()

    def wait_for(self, by: str, value: str) -> WebElement:
        return WebDriverWait(self.driver, WAIT_SECONDS).until(
            EC.visibility_of_element_located((by, value))
        )

    def wait_for_path(self, path: str) -> None:
        WebDriverWait(self.driver, WAIT_SECONDS).until(EC.url_to_be(f"{self.base_url}{path}"))

    def submit_login(self, username: str, password: str) -> None:
        """Fill in and send the admin's own login form; wait for the page that answers."""
        self.open("/admin/login/?next=/admin/")
        self.driver.find_element(By.ID, "id_username").send_keys(username)
        self.driver.find_element(By.ID, "id_password").send_keys(password)
        submit = self.driver.find_element(By.CSS_SELECTOR, "#login-form [type=submit]")
        submit.click()
        WebDriverWait(self.driver, WAIT_SECONDS).until(gone(submit))

    def log_in(self, username: str, password: str) -> None:
        """Through the login form, as a person would; on the admin index after it."""
        self.submit_login(username, password)
        self.wait_for_path("/admin/")
        self.wait_for(By.ID, "user-tools")

    def collapse_nav_sidebar(self) -> None:
        """Close the admin's sidebar on the pages opened from now on, as its toggle would."""
        self.driver.execute_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")

    def scroll_to(self, selector: str) -> None:
        """Bring an element to the top of the window (before a screenshot of it)."""
        element = self.driver.find_element(By.CSS_SELECTOR, selector)
        self.driver.execute_script("arguments[0].scrollIntoView()", element)

    def click_link(self, text: str) -> None:
        """Follow the link ``text`` and wait for the page it leads to."""
        link = self.driver.find_element(By.LINK_TEXT, text)
        target = link.get_attribute("href")
        link.click()
        WebDriverWait(self.driver, WAIT_SECONDS).until(EC.url_to_be(target))
        self.assert_no_alert()

    def open_job(self, job: Job) -> None:
        self.open(f"{JOBS}{job.pk}/change/")
        self.wait_for(By.CSS_SELECTOR, ".field-status .readonly")

    # -- what the page shows ------------------------------------------------

    def text(self, selector: str) -> str:
        return str(self.driver.find_element(By.CSS_SELECTOR, selector).text)

    def messages(self) -> list[str]:
        return [m.text for m in self.driver.find_elements(By.CSS_SELECTOR, "ul.messagelist li")]

    def row_cell(self, pk: object, column: str) -> WebElement:
        """The cell of ``column`` (a ``list_display`` name) in the changelist row of ``pk``."""
        checkbox = self.driver.find_element(
            By.CSS_SELECTOR, f"#result_list input.action-select[value='{pk}']"
        )
        row = checkbox.find_element(By.XPATH, "./ancestor::tr")
        return row.find_element(By.CSS_SELECTOR, f".field-{column}")

    def row_flag(self, pk: object, column: str) -> bool:
        """A boolean column's value: the admin draws it as an icon whose alt is True/False."""
        icon = self.row_cell(pk, column).find_element(By.TAG_NAME, "img")
        return {"True": True, "False": False}[icon.get_attribute("alt")]

    def assert_no_alert(self) -> None:
        """No JavaScript alert is open (a script from a payload would have opened one)."""
        try:
            alert = self.driver.switch_to.alert
        except NoAlertPresentException:
            return
        text = alert.text
        alert.dismiss()
        raise AssertionError(f"a JavaScript alert opened: {text!r}")

    # -- changing things ----------------------------------------------------

    def run_action(self, action: str, pks: Iterable[object]) -> list[str]:
        """Tick the rows of ``pks`` in the open changelist, run ``action``; the messages.

        Waits for the page that follows (the changelist again, with a
        message). If the admin grows a confirmation step for an action,
        that step belongs here.
        """
        for pk in pks:
            self.driver.find_element(
                By.CSS_SELECTOR, f"#result_list input.action-select[value='{pk}']"
            ).click()
        Select(self.driver.find_element(By.NAME, "action")).select_by_value(action)
        go = self.driver.find_element(By.CSS_SELECTOR, "#changelist-form button[name=index]")
        go.click()
        WebDriverWait(self.driver, WAIT_SECONDS).until(gone(go))
        self.wait_for(By.CSS_SELECTOR, "ul.messagelist")
        self.assert_no_alert()
        return self.messages()

    def requeue(self, job: Job) -> list[str]:
        """Requeue the dead job ``job`` from its own page, as an operator would; the messages.

        The page's Requeue button opens a confirmation page; "Yes, I'm
        sure" POSTs it and returns to the job's page with a message.
        """
        self.open_job(job)
        button = self.wait_for(By.CSS_SELECTOR, "a.durable-jobs-requeue")
        button.click()
        confirm = self.wait_for(By.CSS_SELECTOR, "#content-main form [type=submit]")
        self.assert_no_alert()
        confirm.click()
        WebDriverWait(self.driver, WAIT_SECONDS).until(gone(confirm))
        self.wait_for_path(f"{JOBS}{job.pk}/change/")
        self.wait_for(By.CSS_SELECTOR, "ul.messagelist")
        self.assert_no_alert()
        return self.messages()

    def retry_from_step(self, job: Job, step: str) -> tuple[list[str], list[str]]:
        """Retry ``job`` from ``step`` on its own page: the button, the step's select, "Yes".

        The "Retry from step" button opens a confirmation page with a select
        of the job's steps; its POST returns to the job's page with a message.
        Returns the steps the select offered and the messages.
        """
        self.open_job(job)
        button = self.wait_for(By.CSS_SELECTOR, "a.durable-jobs-retry-from-step")
        button.click()
        choice = Select(self.wait_for(By.ID, "id_from_step"))
        self.assert_no_alert()
        offered = [option.text for option in choice.options]
        choice.select_by_value(step)
        confirm = self.driver.find_element(By.CSS_SELECTOR, "#content-main form [type=submit]")
        confirm.click()
        WebDriverWait(self.driver, WAIT_SECONDS).until(gone(confirm))
        self.wait_for_path(f"{JOBS}{job.pk}/change/")
        self.wait_for(By.CSS_SELECTOR, "ul.messagelist")
        self.assert_no_alert()
        return offered, self.messages()

    def steps_table(self) -> list[list[str]]:
        """The open job page's steps table: each row's cells, as the page shows them."""
        table = self.wait_for(By.CSS_SELECTOR, ".field-steps_display table.durable-jobs-steps")
        return [
            [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")
        ]

    # -- the audit trail ----------------------------------------------------

    def history(self, job: Job) -> list[dict[str, str]]:
        """Open ``job``'s History page (from its page's link); its audit entries, newest first."""
        self.open_job(job)
        link = self.wait_for(By.CSS_SELECTOR, "a.historylink")
        link.click()
        self.wait_for_path(f"{JOBS}{job.pk}/history/")
        self.wait_for(By.ID, "audit-trail")
        self.assert_no_alert()
        return [
            {
                "actor": row.find_element(By.CSS_SELECTOR, ".audit-actor").text,
                "door": row.find_element(By.CSS_SELECTOR, ".audit-door").text,
                "action": row.find_element(By.CSS_SELECTOR, ".audit-action").text,
            }
            for row in self.driver.find_elements(By.CSS_SELECTOR, "#audit-trail tr.audit-entry")
        ]
