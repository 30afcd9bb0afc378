"""The admin as moderators use it: a real browser (Debian's headless Chromium,
driven by Selenium) signs a moderator made by ``createmoderator`` into the
stack's admin, suspends a user and deletes a tweet; the API then shows both
gone from every timeline (exactly: the oracle), and the admin shows the audit
rows."""

from __future__ import annotations

import random
import shutil
import uuid
from collections.abc import Iterator

import pytest
import requests
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.wait import WebDriverWait

from tests.support.oracle import PASSWORD, Workload, check_against_oracle
from tests.support.stack import Stack


def _chromium() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (browser and driver):
        pytest.fail("chromium and chromedriver are needed: make check-chromium installs them")
    return browser, driver


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    binary, driver = _chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    chrome.set_page_load_timeout(60)
    try:
        yield chrome
    finally:
        chrome.quit()


def _sign_in(browser: WebDriver, base: str, username: str) -> None:
    browser.get(f"{base}/admin/login/?next=/admin/")
    browser.find_element(By.ID, "id_username").send_keys(username)
    browser.find_element(By.ID, "id_password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    assert "Site administration" in browser.page_source, browser.page_source[-2000:]


def _messages(browser: WebDriver) -> str:
    """The admin's messages once the page a click submitted shows some (a
    click returns before the form's answer has loaded: on a busy machine,
    the old page would still be there)."""

    def shown(b: WebDriver) -> str:
        return " ".join(m.text for m in b.find_elements(By.CSS_SELECTOR, "ul.messagelist li"))

    try:
        return WebDriverWait(browser, 60, poll_frequency=0.2).until(shown)
    except TimeoutException:
        return ""


def test_a_moderator_suspends_a_user_and_deletes_a_tweet_in_the_admin(
    stack: Stack, browser: WebDriver
) -> None:
    prefix = f"b{uuid.uuid4().hex[:6]}"
    ann, bob, cat = (f"{prefix}{n}" for n in ("ann", "bob", "cat"))
    work = Workload(stack, random.Random(7), prefix)
    for name in (ann, bob, cat):
        work.users[name] = work.call(
            "POST", "/auth/register", body={"username": name, "password": PASSWORD}
        )["token"]
    work.call("POST", f"/users/{bob}/follow", ann)
    work.call("POST", f"/users/{cat}/follow", ann)
    work.call("POST", f"/users/{bob}/follow", cat)
    bobs = [work.call("POST", "/tweets", bob, {"text": f"bob {i}"})["id"] for i in range(3)]
    cats = [work.call("POST", "/tweets", cat, {"text": f"cat {i}"})["id"] for i in range(3)]
    check_against_oracle(stack, [ann, bob, cat])

    moderator = f"{prefix}mod"
    secret = stack.logs / f"{moderator}.password"
    secret.write_text(PASSWORD)
    stack.manage("createmoderator", moderator, "--password-file", str(secret))
    _sign_in(browser, stack.base, moderator)

    # Suspend bob: tick his row in the user list, pick the action, Go.
    (bob_id,) = stack.sql("SELECT id FROM feed_user WHERE username = ?", bob)[0]
    browser.get(f"{stack.base}/admin/feed/user/?q={bob}")
    browser.find_element(By.CSS_SELECTOR, f"input[name=_selected_action][value='{bob_id}']").click()
    Select(browser.find_element(By.NAME, "action")).select_by_value("suspend_users")
    browser.find_element(By.CSS_SELECTOR, "button[name=index]").click()
    assert "suspended 1 user(s)" in _messages(browser).lower(), browser.page_source[-2000:]

    # Delete one of cat's tweets from its page, confirming as the admin asks.
    browser.get(f"{stack.base}/admin/feed/tweet/{cats[1]}/change/")
    browser.find_element(By.CSS_SELECTOR, "a.deletelink").click()
    browser.find_element(By.CSS_SELECTOR, "form input[type=submit]").click()
    assert "deleted successfully" in _messages(browser).lower(), browser.page_source[-2000:]

    # Through the API: both left every timeline, exactly, and bob is not found.
    check_against_oracle(stack, [ann, bob, cat])
    headers = {"Authorization": f"Bearer {work.users[ann]}"}
    timeline = requests.get(f"{stack.base}/api/v1/timeline", headers=headers, timeout=30).json()
    shown = [t["id"] for t in timeline["tweets"]]
    assert shown == [cats[2], cats[0]], shown  # bob's three and the deleted one are gone
    assert not set(bobs) & set(shown)
    assert requests.get(f"{stack.base}/api/v1/users/{bob}", timeout=30).status_code == 404

    # The audit rows, as the moderator sees them.
    browser.get(f"{stack.base}/admin/feed/moderationaction/?q={prefix}")
    rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")]
    assert len(rows) == 2, rows
    assert any(moderator in r and bob in r and "suspend" in r.lower() for r in rows), rows
    assert any(moderator in r and str(cats[1]) in r for r in rows), rows
