"""The dashboard's live view in a real browser (headless Chromium, as test_dashboard.py):
the operation running now, drawn from the one event stream as it is written, without a
reload — over real local deploys started by the command line in another process, with
nothing set for the dashboard to see them.

* a deploy held at its health gate (the web process answers ``/up`` only once a file the
  test makes exists): the slot's page shows its plan, its step advancing, the wait and its
  last probe, and then its outcome; the overview marks the slot while it runs;
* a canary walking its steps under a request loop: the page draws its share and counts as
  a chart, the figures the deploy's own ``canary`` events hold;
* what the command line writes for the dashboard: one file per operation, 0600, holding no
  secret.

Screenshots go to ``$SHIPWAY_TEST_ARTIFACTS/<test>/`` (``artifacts``).
"""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shipway.events.live import op_files
from tests.backends.local.browser import Dashboard
from tests.backends.local.conftest import API_TOKEN, DB_PASSWORD, Slot, eventually, slot_of
from tests.backends.local.test_canary import APP as CANARY_APP
from tests.backends.local.test_canary import SPEC as CANARY_SPEC
from tests.backends.local.test_canary import released
from tests.loops import RequestLoop

pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By

GATED_APP = '''\
"""A web app whose health check passes only once the file $GATE exists."""
import http.server
import os

GATE = os.environ["GATE"]


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        code = 503 if self.path == "/up" and not os.path.exists(GATE) else 200
        body = ("gated " + os.environ.get("SHIPWAY_RELEASE", "") + "\\n").encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
'''

GATED_SPEC = """\
[app]
name = "gated"

[processes.web]
command = "python3 app.py"
port = 8000
[processes.web.healthcheck]
path = "/up"
interval = "100ms"
attempts = 1200

[env]
GATE = "GATE_PATH"

[slots.local]
"""

STEP = re.compile(r"\[(\d+)/(\d+)\]")

#: records, in the page, every step line and state the live section shows (what a person
#: sees change), without touching how the page draws
WATCH = """
window.liveSeen = [];
const note = () => {
  const step = document.getElementById("live-step");
  const state = document.getElementById("live-state");
  const seen = [step ? step.textContent : "", state ? state.textContent : ""].join(" | ");
  if (window.liveSeen[window.liveSeen.length - 1] !== seen) window.liveSeen.push(seen);
};
new MutationObserver(note).observe(document.body, {subtree: true, childList: true,
                                                    characterData: true});
window.stillTheSamePage = true;
"""


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[Slot]:
    """The gated app deployed once (r1, its gate open)."""
    app_dir = tmp_path / "gated"
    app_dir.mkdir()
    (app_dir / "app.py").write_text(GATED_APP)
    gate = tmp_path / "gate-r1"
    gate.write_text("open\n")
    (app_dir / "shipway.toml").write_text(GATED_SPEC.replace("GATE_PATH", str(gate)))
    s = slot_of(app_dir, tmp_path / "state")
    try:
        s.deploy()
        yield s
    finally:
        s.close()


def text_of(driver: Any, element_id: str) -> str:
    found = driver.find_elements(By.ID, element_id)
    return str(found[0].text) if found else ""


def open_slot_page(driver: Any, dashboard: Dashboard, app: str) -> None:
    """The slot's page (r1 live), its live stream open."""
    dashboard.wait_up()
    driver.get(dashboard.url + f"#/slot/{app}/local")
    eventually(lambda: text_of(driver, "live-release") == "r1", what="the slot's page")
    script = "return document.documentElement.dataset.live === 'open';"
    eventually(lambda: driver.execute_script(script), what="the live stream")


def test_a_deploy_held_at_its_health_gate_is_drawn_live_step_by_step_to_its_outcome(
    gated: Slot, browser: Any, artifacts: Path, tmp_path: Path
) -> None:
    gate = tmp_path / "gate-r2"
    gated.edit_spec(str(tmp_path / "gate-r1"), str(gate))  # r2 waits until the test opens it
    dashboard = Dashboard(gated)
    try:
        open_slot_page(browser, dashboard, "gated")
        browser.execute_script(WATCH)

        deploy = gated.spawn("deploy", "local")  # the command line, in a process of its own
        def web_wait() -> str:
            rows = browser.find_elements(By.CSS_SELECTOR, '#live tr[data-process="web"]')
            return str(rows[0].text) if rows else ""

        eventually(lambda: "ready 0 of 1" in web_wait(), timeout=60, what="the wait on web")
        eventually(lambda: "GET /up answered 503" in web_wait(), what="its last probe")
        assert text_of(browser, "live-state") == "running"
        held = text_of(browser, "live-step")
        assert "wait until web is ready" in held, held
        assert "wait until web is ready" in text_of(browser, "live-plan")
        assert "deploy · r2" in text_of(browser, "live-what")
        browser.save_screenshot(str(artifacts / "deploy-held-at-the-gate.png"))
        browser.set_window_size(390, 844)  # a phone: nothing wider than the screen
        width = browser.execute_script("return document.documentElement.scrollWidth;")
        browser.save_screenshot(str(artifacts / "deploy-held-phone.png"))
        browser.set_window_size(1280, 900)
        assert width <= 390

        # the overview marks the slot while it runs (the same page: a hash change)
        browser.execute_script("location.hash = '#/';")
        mark = eventually(
            lambda: browser.find_elements(
                By.CSS_SELECTOR, 'a.slot[data-app="gated"][data-slot="local"] .live-mark'
            ),
            what="the overview's marker",
        )
        assert mark[0].text.startswith("● deploy r2 ["), mark[0].text
        browser.save_screenshot(str(artifacts / "overview-marks-the-deploy.png"))
        browser.execute_script("location.hash = '#/slot/gated/local';")
        eventually(lambda: "wait until web" in text_of(browser, "live-step"), what="back")

        gate.write_text("open\n")  # the gate opens: the rollout goes on
        eventually(lambda: text_of(browser, "live-state") == "rolled", timeout=60, what="rolled")
        assert deploy.wait(timeout=60) == 0
        outcome = text_of(browser, "live-outcome")
        assert outcome == "rolled gated/local from r1 to r2", outcome
        eventually(lambda: text_of(browser, "live-release") == "r2", what="r2 live")
        browser.save_screenshot(str(artifacts / "deploy-rolled.png"))
        assert browser.execute_script("return window.stillTheSamePage === true;"), "reloaded"

        # what the page showed, in order: the steps advancing past the gate, then the outcome
        # (events read in one batch are drawn once: fast steps may show only the last)
        # (the page may first draw r1's deploy, the slot's last operation, under load: only
        # the lines of r2's plan, counted in its own number of steps, are this deploy's)
        seen = browser.execute_script("return window.liveSeen;")
        gate_step = STEP.search(held)
        assert gate_step is not None, held
        at_gate, total = int(gate_step.group(1)), gate_step.group(2)
        steps = [int(m.group(1)) for m in map(STEP.search, seen) if m and m.group(2) == total]
        assert steps == sorted(steps), seen
        assert max(steps) > at_gate, f"no step after the gate was drawn: {seen}"
        assert seen[-1].endswith("| rolled"), seen
    finally:
        dashboard.stop()


@pytest.fixture
def canary(tmp_path: Path) -> Iterator[Slot]:
    app_dir = tmp_path / "canary"
    app_dir.mkdir()
    (app_dir / "app.py").write_text(CANARY_APP)
    (app_dir / "shipway.toml").write_text(CANARY_SPEC.replace("STEP_TIME", "3s"))
    s = slot_of(app_dir, tmp_path / "state")
    try:
        s.deploy()  # r1: the stable
        yield s
    finally:
        s.close()


def test_a_canary_is_drawn_as_a_chart_of_its_share_and_counts_while_it_walks(
    canary: Slot, browser: Any, artifacts: Path
) -> None:
    canary.edit_spec('BROKEN = "0"', 'BROKEN = "0"\nCOLOUR = "blue"')
    dashboard = Dashboard(canary)
    try:
        open_slot_page(browser, dashboard, "canary")
        with RequestLoop(lambda _: released(canary), rate=100):
            deploy = canary.spawn("deploy", "local")

            def counted_while_running() -> bool:
                figures = text_of(browser, "canary-figures")
                line = browser.find_elements(By.CSS_SELECTOR, "#canary-chart polyline.canary")
                drawn = len(line[0].get_attribute("points").split()) if line else 0
                return text_of(browser, "live-state") == "running" and (
                    "canary: 0 requests" not in figures and "requests" in figures and drawn >= 3
                )

            eventually(counted_while_running, timeout=90, what="the canary's counts, live")
            assert browser.find_elements(By.CSS_SELECTOR, "#canary-chart polyline.canary")
            browser.execute_script("document.getElementById('live-step').scrollIntoView();")
            browser.save_screenshot(str(artifacts / "canary-walking.png"))
            eventually(lambda: text_of(browser, "live-state") == "rolled", timeout=90, what="end")
            assert deploy.wait(timeout=60) == 0
        browser.execute_script("document.getElementById('canary-chart').scrollIntoView();")
        browser.save_screenshot(str(artifacts / "canary-rolled.png"))

        # the chart is the deploy's own canary events: both analysed shares, the last figures
        (op,) = [f for f in op_files(canary.state / "_events") if f.ended()][-1:]
        events = [json.loads(line) for line in op.path.read_text().splitlines()]
        figures = [e for e in events if e["event"] == "canary"]
        assert {e["percent"] for e in figures} == {10, 50}
        final = [e for e in figures if e["final"]]
        assert [(e["percent"], e["verdict"]) for e in final] == [(10, "promote"), (50, "promote")]
        last = figures[-1]
        shown = text_of(browser, "canary-figures")
        assert shown.startswith(
            f"canary: {last['canary']['requests']} requests, {last['canary']['bad']} bad"
        ), (shown, last)
        assert f"stable: {last['stable']['requests']} requests" in shown
        labels = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#canary-chart text")]
        assert "10%" in labels and "50%" in labels, labels
        points = browser.find_element(By.CSS_SELECTOR, "#canary-chart polyline.canary")
        assert len(points.get_attribute("points").split()) == len(figures)
    finally:
        dashboard.stop()


def test_every_operation_leaves_a_file_of_its_own_without_a_secret(notes: Slot) -> None:
    notes.deploy()
    notes.edit_spec('GREETING = "hi"', 'GREETING = "hello again"')
    notes.deploy()
    files = op_files(notes.state / "_events")
    assert [(f.app, f.slot) for f in files] == [("notes", "local")] * 2
    for f in files:
        assert stat.S_IMODE(f.path.stat().st_mode) == 0o600
        text = f.path.read_text()
        assert '"event": "started"' in text and f.ended()
        for secret in (DB_PASSWORD, API_TOKEN):
            assert secret not in text
    assert notes.run("status", "local").code == 0  # a read is no operation: no file
    assert len(op_files(notes.state / "_events")) == 2
