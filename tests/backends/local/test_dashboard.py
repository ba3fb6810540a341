"""``shipway dashboard`` in a real browser: Debian's headless Chromium, driven through its
chromedriver by Selenium, over the page a real local deploy makes — what a person sees.

The notes app (conftest) has two secrets; its web process prints one as it starts. The
tests check the live release on the overview, the page following a second deploy without a
reload, the diff of two releases on the slot's page, both secrets absent from every JSON
read and from the page, the token a listen beyond loopback needs, and every method but GET
and HEAD refused. Screenshots go to ``$SHIPWAY_TEST_ARTIFACTS/<test>/`` (default: the
test's ``tmp_path/screenshots``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.backends.local.conftest import API_TOKEN, DB_PASSWORD, Slot, eventually, free_port

pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By

from tests.backends.local.browser import Dashboard, request

TOKEN = "tkn-3f2a9c41d07be85e6b1a"
SECRETS = (DB_PASSWORD, API_TOKEN)


@pytest.fixture
def deployed(notes: Slot) -> Iterator[Slot]:
    """The notes app deployed once (r1); its web process prints a secret as it starts."""
    app_py = notes.app_dir / "app.py"
    app_py.write_text(
        app_py.read_text().replace(
            'DB = os.environ.get("NOTES_DB", "notes.db")',
            'DB = os.environ.get("NOTES_DB", "notes.db")\n'
            'print("starting with", os.environ.get("DB_PASSWORD"), flush=True)',
        )
    )
    notes.deploy()
    yield notes


@pytest.fixture
def dashboard(deployed: Slot) -> Iterator[Dashboard]:
    d = Dashboard(deployed)
    try:
        d.wait_up()
        yield d
    finally:
        d.stop()


def slot_release(driver: Any, app: str, slot: str) -> str:
    row = driver.find_element(By.CSS_SELECTOR, f'a.slot[data-app="{app}"][data-slot="{slot}"]')
    return str(row.find_element(By.CSS_SELECTOR, ".release").text)


def test_the_overview_shows_the_live_release_and_follows_a_deploy_without_a_reload(
    deployed: Slot, dashboard: Dashboard, browser: Any, artifacts: Path
) -> None:
    browser.get(dashboard.url)
    eventually(lambda: slot_release(browser, "notes", "local") == "r1", what="r1 on the page")
    row = browser.find_element(By.CSS_SELECTOR, 'a.slot[data-app="notes"][data-slot="local"]')
    assert row.find_element(By.CSS_SELECTOR, ".state").text == "running"
    browser.save_screenshot(str(artifacts / "overview-r1.png"))
    browser.execute_script("window.stillTheSamePage = true;")

    deployed.edit_spec('GREETING = "hi"', 'GREETING = "hello again"')
    deployed.deploy()

    eventually(lambda: slot_release(browser, "notes", "local") == "r2", what="r2 on the page")
    assert browser.execute_script("return window.stillTheSamePage === true;"), "it reloaded"
    browser.save_screenshot(str(artifacts / "overview-r2.png"))
    browser.set_window_size(390, 844)  # a phone: one column, nothing wider than the screen
    width = browser.execute_script("return document.documentElement.scrollWidth;")
    browser.save_screenshot(str(artifacts / "overview-phone.png"))
    browser.set_window_size(1280, 900)
    assert width <= 390


def test_the_slot_page_shows_the_diff_of_two_releases_and_no_secret_anywhere(
    deployed: Slot, dashboard: Dashboard, browser: Any, artifacts: Path
) -> None:
    new_password = "pw-9e107d9d372bb682"
    (deployed.app_dir / "secrets" / "db-password").write_text(new_password + "\n")
    deployed.edit_spec('GREETING = "hi"', 'GREETING = "hello again"')
    deployed.deploy()

    browser.get(dashboard.url + "#/slot/notes/local")
    eventually(
        lambda: "GREETING" in browser.find_element(By.ID, "diff-text").text,
        what="the diff of r1 and r2",
    )
    diff = browser.find_element(By.ID, "diff-text").text
    assert "changes from r1 to r2" in diff
    assert '"hi" → "hello again"' in diff
    assert "DB_PASSWORD" in diff  # the changed secret is named …
    eventually(
        lambda: "starting with ***" in browser.find_element(By.ID, "logs").text,
        what="the web process's first line, masked, in the log tail",
    )
    assert browser.find_element(By.ID, "live-release").text == "r2"
    browser.save_screenshot(str(artifacts / "slot-page.png"))
    browser.execute_script("document.getElementById('diff-text').scrollIntoView();")
    browser.save_screenshot(str(artifacts / "slot-page-diff.png"))

    # … and no secret's value, old or new, is on the page or in any read it makes
    seen = {
        "page text": browser.find_element(By.TAG_NAME, "body").text,
        "page source": browser.page_source,
    }
    reads = ("/api/overview", "/api/slot?app=notes&slot=local",
             "/api/diff?app=notes&slot=local&a=1&b=2", "/", "/static/dashboard.js")  # fmt: skip
    for path in reads:
        seen[path] = request(dashboard.port, path)[2]
    assert json.loads(seen["/api/slot?app=notes&slot=local"])["logs"]["lines"]
    assert "null" not in seen["page text"]  # nothing missing is drawn as "null"
    for secret in (*SECRETS, new_password):
        leaked = [where for where, text in seen.items() if secret in text]
        assert not leaked, f"a secret's value is in {leaked}"


def test_a_listen_beyond_loopback_is_refused_without_a_token(deployed: Slot) -> None:
    r = deployed.run("dashboard", "--listen", "0.0.0.0", "--port", str(free_port()))
    assert r.code == 2, r.text
    assert "--listen 0.0.0.0" in r.err and "--token" in r.err


def test_with_a_token_every_request_needs_it(deployed: Slot, browser: Any, artifacts: Path) -> None:
    d = Dashboard(deployed, "--listen", "0.0.0.0", "--token", TOKEN)
    try:
        d.wait_up()
        for path in ("/", "/api/overview", "/static/dashboard.js", f"/?token={TOKEN}x"):
            code, _, body = request(d.port, path)
            assert code == 401, (path, code)
            assert "notes" not in body
        wrong = {"Authorization": f"Bearer {TOKEN[:-1]}"}
        assert request(d.port, "/api/overview", headers=wrong)[0] == 401
        right = {"Authorization": f"Bearer {TOKEN}"}
        code, _, body = request(d.port, "/api/overview", headers=right)
        assert code == 200 and '"notes"' in body

        # a person opens the login link: the cookie, and the page without the token
        browser.delete_all_cookies()
        browser.get(f"http://127.0.0.1:{d.port}/?token={TOKEN}")
        eventually(lambda: slot_release(browser, "notes", "local") == "r1", what="the page")
        assert TOKEN not in browser.current_url
        browser.save_screenshot(str(artifacts / "after-login.png"))
    finally:
        d.stop()


def test_every_method_but_get_and_head_is_refused(deployed: Slot, dashboard: Dashboard) -> None:
    before = deployed.history()
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "DEPLOY"):
        for path in ("/", "/api/overview", "/api/slot?app=notes&slot=local"):
            code, headers, _ = request(dashboard.port, path, method)
            assert code == 405, (method, path, code)
            assert headers["Allow"] == "GET, HEAD"
    code, headers, body = request(dashboard.port, "/api/overview", "HEAD")
    assert code == 200 and body == "" and int(headers["Content-Length"]) > 0
    assert deployed.history() == before
    # still the one process the deploy started (supervisord says STARTING until the
    # program's start seconds have passed, which a loaded run can still be within)
    eventually(lambda: deployed.processes()["web"]["state"] == "running", what="web running")
