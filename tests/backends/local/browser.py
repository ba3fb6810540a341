"""What the dashboard's browser tests share: a ``shipway dashboard`` process of a test's
slot, plain HTTP requests to it, Debian's headless Chromium driven through its chromedriver
by Selenium (``browser``, one per module), and where a test's screenshots are kept
(``artifacts``: ``$SHIPWAY_TEST_ARTIFACTS/<test>/``, default the test's
``tmp_path/screenshots``). The fixtures are this directory's (its conftest imports them)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.backends.local.conftest import Slot, eventually, free_port

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def request(
    port: int, path: str, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        conn.close()


class Dashboard:
    """A ``shipway dashboard`` process of the test's slot, on a port of the test's own."""

    def __init__(self, slot: Slot, *args: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            slot.argv("dashboard", "--port", str(self.port), *args),
            env=slot.env,
            cwd=slot.app_dir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.url = f"http://127.0.0.1:{self.port}/"

    def wait_up(self) -> None:
        def answers() -> bool:
            assert self.proc.poll() is None, self.output()
            return request(self.port, "/static/dashboard.css")[0] in (200, 401)

        eventually(answers, timeout=60, what="the dashboard to answer")

    def json(self, path: str) -> Any:
        code, _, body = request(self.port, path)
        assert code == 200, body
        return json.loads(body)

    def output(self) -> str:
        if self.proc.poll() is None:
            return ""
        return self.proc.stdout.read() if self.proc.stdout else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()


@pytest.fixture
def artifacts(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Where this test's screenshots are kept."""
    base = os.environ.get("SHIPWAY_TEST_ARTIFACTS")
    out = Path(base) / request.node.name if base else tmp_path / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    return out


# session, not module: a worker runs a module's tests between others' (slowest first), and
# a module fixture would start Chromium again for each of them
@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not shutil.which(p)]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} missing: apt-get install chromium chromium-driver "
            "(scripts/browser installs them)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--disable-gpu", "--window-size=1280,900"):  # fmt: skip
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(chromium: Any) -> Any:
    """The worker's Chromium as a fresh one would be for this test: no cookies (a cookie
    is kept per host, not per port: another test's dashboard token would be sent), the
    window of a desktop (a test that failed before putting its phone size back)."""
    chromium.delete_all_cookies()
    chromium.set_window_size(1280, 900)
    return chromium
