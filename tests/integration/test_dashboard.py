"""The dashboard in a real browser: headless Chromium (Debian's chromium and
chromium-driver) driven by Selenium against a real api and worker with auth on.

A tenant signs in, finds a schedule, pauses it with a note (seen paused through the
gRPC API), redrives a dead letter (the callback reaches a real receiver), and cannot
see or act on another tenant's schedule; an admin sees the cluster. With
CLOCKWORK_SCREENSHOTS=DIR the tests save a screenshot of each page there (the ones in
docs/img/ were taken so).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from clockwork_svc import app
from clockwork_svc.api.v1 import scheduler_pb2 as pb
from clockwork_svc.client import ClientSettings, ClockworkClient
from clockwork_svc.dashboard import pages
from clockwork_svc.dashboard.session import Csrf, Session
from clockwork_svc.domain import triggers
from clockwork_svc.domain.labels import parse_selector
from clockwork_svc.domain.model import ScheduleQuery
from clockwork_svc.domain.spec import HttpTarget, ScheduleSpec
from clockwork_svc.server.auth import AuthSettings
from e2e.sink import RecordingSink
from tests.fuzz.harness import ThreadedNode
from tests.integration.test_dev_node import dev_settings

ACME = "acme-token-0123456789"
GLOBEX = "globex-token-0123456789"
ADMIN = "admin-token-0123456789"
GET = "/clockwork.api.v1.SchedulerService/GetSchedule"


def browser_paths() -> tuple[str, str]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    if os.environ.get("CI") == "true" or os.environ.get("CLOCKWORK_REQUIRE_INFRA") == "1":
        pytest.fail("chromium and chromium-driver are not installed")
    pytest.skip("chromium and chromium-driver are not installed")


@dataclasses.dataclass
class Site:
    node: ThreadedNode
    url: str
    sink: RecordingSink

    def api(self, method: str, path: str, body: Any = None, token: str = ACME) -> Any:
        request = urllib.request.Request(
            self.url + path,
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read())

    def grpc_schedule(self, key: str, token: str = ACME) -> pb.Schedule:
        reply = self.node.call(
            GET,
            pb.GetScheduleRequest(key=key).SerializeToString(),
            (("authorization", f"Bearer {token}"),),
        )
        assert reply.code is grpc.StatusCode.OK, reply
        return pb.Schedule.FromString(reply.body)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    base = dev_settings(tmp_path_factory.mktemp("dashboard"))
    auth = AuthSettings.from_pairs(f"acme:{ACME},globex:{GLOBEX}", admin_token=ADMIN)
    api = dataclasses.replace(base.api, auth=auth, http_listen=("127.0.0.1", 0))
    with ThreadedNode(dataclasses.replace(base, api=api), worker=True) as node:
        sink = node.run(RecordingSink().start())
        try:
            yield Site(node, f"http://127.0.0.1:{node.http_port}", sink)
        finally:
            node.run(sink.stop())


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    chromium, driver_path = browser_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1360,860"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.implicitly_wait(5)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(browser: webdriver.Chrome, name: str) -> None:
    folder = os.environ.get("CLOCKWORK_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(Path(folder) / f"dashboard-{name}.png"))


def click_and_load(browser: webdriver.Chrome, element_id: str) -> None:
    """Click a button that submits a form, and wait for the next page."""
    old = browser.find_element(By.TAG_NAME, "html")
    browser.find_element(By.ID, element_id).click()

    def replaced(_: webdriver.Chrome) -> bool:
        # While the old document is torn down, Chromium answers either "stale
        # element" or an inspector error saying the node left the document.
        try:
            old.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as e:
            if "does not belong to the document" in str(e.msg):
                return True
            raise
        return False

    WebDriverWait(browser, 15).until(replaced)
    WebDriverWait(browser, 15).until(
        lambda b: b.execute_script("return document.readyState") == "complete"
    )


def sign_in(browser: webdriver.Chrome, site: Site, token: str, tenant: str = "") -> None:
    browser.get(site.url + "/ui/login")
    browser.find_element(By.ID, "token").send_keys(token)
    if tenant:
        browser.find_element(By.ID, "tenant").send_keys(tenant)
    click_and_load(browser, "sign-in")


def at(delta: timedelta) -> str:
    return (datetime.now(UTC) + delta).isoformat().replace("+00:00", "Z")


def create(site: Site, key: str, spec: dict[str, Any], token: str = ACME, **extra: Any) -> None:
    site.api("POST", "/v1/schedules", {"key": key, "spec": spec, **extra}, token=token)


def test_sign_in_find_a_schedule_and_pause_it_with_a_note(
    site: Site, browser: webdriver.Chrome
) -> None:
    hook = {"http": {"url": site.sink.url + "/hook"}}
    create(
        site,
        "reports/daily",
        {"cron": {"expression": "0 9 * * 1-5", "timezone": "Europe/Paris"}, **hook},
        labels={"team": "finance"},
    )
    create(site, "reports/weekly", {"cron": {"expression": "0 8 * * MON"}, **hook})
    create(site, "invoices/42", {"once": {"at": at(timedelta(days=3))}, **hook})
    create(site, "heartbeat", {"interval": {"every": "300s"}, **hook})

    sign_in(browser, site, ACME)
    assert browser.current_url.endswith("/ui/schedules")
    keys = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#schedules tbody td a")]
    assert {"reports/daily", "reports/weekly", "invoices/42", "heartbeat"} <= set(keys)
    assert "At 09:00, Monday through Friday (Europe/Paris)" in browser.page_source
    screenshot(browser, "schedules")

    browser.find_element(By.ID, "prefix").send_keys("reports/")
    browser.find_element(By.ID, "selector").send_keys("team=finance")
    click_and_load(browser, "search")
    rows = browser.find_elements(By.CSS_SELECTOR, "#schedules tbody td a")
    assert [a.text for a in rows] == ["reports/daily"]
    rows[0].click()
    assert browser.find_element(By.ID, "key").text == "reports/daily"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#upcoming li")) == 10

    browser.find_element(By.ID, "pause-note").send_keys("quarter close, INC-42")
    click_and_load(browser, "pause")
    assert browser.find_element(By.ID, "state").text == "paused"
    assert browser.find_element(By.ID, "note").text == "quarter close, INC-42"
    screenshot(browser, "schedule")
    seen = site.grpc_schedule("reports/daily")
    assert seen.state == pb.PAUSED and seen.pause_note == "quarter close, INC-42"

    click_and_load(browser, "resume")
    assert browser.find_element(By.ID, "state").text == "active"
    assert site.grpc_schedule("reports/daily").state == pb.ACTIVE


def test_redrive_a_dead_letter_and_the_callback_arrives(
    site: Site, browser: webdriver.Chrome
) -> None:
    site.sink.fail_with(400)  # a permanent failure: dead-lettered at once
    try:
        spec = {
            "once": {"at": at(timedelta(0))},
            "http": {"url": site.sink.url + "/billing"},
            "retry": {"maxAttempts": 1},
        }
        create(site, "billing/run-7", spec)
        site.node.run(site.sink.wait_for("/billing", 1, timeout_s=15))
        deadline = time.monotonic() + 15
        while not site.api("GET", "/v1/deadLetters?range.key=billing/run-7")["deadLetters"]:
            assert time.monotonic() < deadline, "no dead letter"
            time.sleep(0.1)
    finally:
        site.sink.heal()

    sign_in(browser, site, ACME)
    browser.get(site.url + "/ui/dead-letters")
    row = browser.find_element(By.XPATH, "//tr[td[text()='billing/run-7']]")
    assert "400" in row.text
    screenshot(browser, "dead-letters")
    row.find_element(By.CSS_SELECTOR, "input[type=checkbox]").click()
    click_and_load(browser, "redrive")
    assert browser.find_element(By.ID, "redriven").text == "1 redriven, 0 skipped"
    got = site.node.run(site.sink.wait_for("/billing", 2, timeout_s=15))
    assert got[1].ok


def test_a_tenant_cannot_see_or_act_on_another_tenants_schedule(
    site: Site, browser: webdriver.Chrome
) -> None:
    create(
        site, "acme-only", {"once": {"at": at(timedelta(days=1))}, "http": {"url": site.sink.url}}
    )
    sign_in(browser, site, GLOBEX)
    keys = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#schedules tbody td a")]
    assert "acme-only" not in keys
    browser.get(site.url + "/ui/schedule?key=acme-only")
    assert browser.find_element(By.TAG_NAME, "h1").text == "NOT_FOUND"

    def post(form: dict[str, str], token: str, origin: str = "") -> int:
        headers = {"Cookie": f"clockwork_token={token}"}
        if origin:
            headers["Origin"] = origin
        request = urllib.request.Request(
            site.url + "/ui/schedule",
            method="POST",
            data=urllib.parse.urlencode(form).encode(),
            headers=headers,
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                return int(reply.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    globex_csrf = Csrf().token(Session(GLOBEX, ""))
    pause = {"key": "acme-only", "action": "pause", "note": "x"}
    # globex's own form, aimed at acme's key: the API answers NOT_FOUND.
    assert post({**pause, "csrf": globex_csrf}, GLOBEX) == 200
    # Without the session's CSRF token, nothing is done.
    assert post(pause, ACME) == 403
    assert post({**pause, "csrf": globex_csrf}, ACME) == 403
    # A form posted from another site is refused even with the right token.
    acme_csrf = Csrf().token(Session(ACME, ""))
    assert post({**pause, "csrf": acme_csrf}, ACME, origin="http://evil.example") == 403
    assert site.grpc_schedule("acme-only").state == pb.ACTIVE


def test_an_admin_sees_the_cluster_and_a_bad_token_is_refused(
    site: Site, browser: webdriver.Chrome
) -> None:
    sign_in(browser, site, "not-a-token-0123456789")
    assert "UNAUTHENTICATED" in browser.find_element(By.ID, "error").text
    sign_in(browser, site, "")
    assert "missing bearer token" in browser.find_element(By.ID, "error").text
    sign_in(browser, site, ADMIN, tenant="acme")
    browser.get(site.url + "/ui/cluster")
    assert browser.find_element(By.ID, "shards").text.startswith("8 of 8 shards owned")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#workers tbody tr")) == 1
    [owner] = browser.find_elements(By.CSS_SELECTOR, "#owners tbody tr")
    assert owner.find_elements(By.TAG_NAME, "td")[1].text == "0-7"
    assert "No autoscaler has recorded a decision" in browser.find_element(By.ID, "autoscaler").text
    # The operator records each round's decision (here over HTTP, as an admin).
    decision = {
        "deployment": "clockwork-system/clockwork-worker",
        "currentReplicas": 2,
        "desiredReplicas": 3,
        "reason": "demand 1240.0/s needs 3",
        "decideTime": at(timedelta(0)),
        "lastChangeTime": at(timedelta(0)),
        "decidedBy": "clockwork-operator-7d9f",
    }
    assert (
        site.api("PUT", "/v1/cluster/scaleDecision", decision, token=ADMIN)["desiredReplicas"] == 3
    )
    browser.get(site.url + "/ui/cluster")
    shown = browser.find_element(By.ID, "decision").text
    assert shown == "2 → 3 workers: demand 1240.0/s needs 3"
    assert "by clockwork-operator-7d9f" in browser.find_element(By.ID, "autoscaler").text
    screenshot(browser, "cluster")
    sign_in(browser, site, ACME)
    browser.get(site.url + "/ui/cluster")
    assert browser.find_element(By.TAG_NAME, "h1").text == "PERMISSION_DENIED"


async def test_without_tokens_an_empty_sign_in_is_the_default_tenant(tmp_path: Path) -> None:
    base = dev_settings(tmp_path)
    api = dataclasses.replace(base.api, http_listen=("127.0.0.1", 0))
    async with app.running(dataclasses.replace(base, api=api), api=True, worker=False) as node:
        assert node.http is not None and node.api is not None
        url = f"http://127.0.0.1:{node.http.port}"
        settings = ClientSettings(f"127.0.0.1:{node.api.port}", tenant="default")
        async with ClockworkClient(settings) as client:
            hourly = triggers.IntervalTrigger(3_600_000)
            await client.create(
                "from-the-cli", ScheduleSpec(hourly, HttpTarget("http://x.example"))
            )
        # unsafe: keep cookies of an IP address host, as a browser does.
        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(url, cookie_jar=jar) as session:
            async with session.post("/ui/login", data={"token": "", "tenant": ""}) as reply:
                assert reply.url.path == "/ui/schedules", await reply.text()
                page = await reply.text()
            assert "from-the-cli" in page and "every 1 hour" in page
            assert {c.key: c.value for c in jar}["clockwork_tenant"] == "default"


async def _sparse_filter_page(tmp_path: Path) -> str:
    """The schedules page for a selector that 3 of 2,503 schedules match, where one
    ListSchedules call answers short."""
    base = dev_settings(tmp_path)
    api = dataclasses.replace(base.api, http_listen=("127.0.0.1", 0))
    async with app.running(dataclasses.replace(base, api=api), api=True, worker=False) as node:
        assert node.http is not None and node.api is not None
        settings = ClientSettings(f"127.0.0.1:{node.api.port}", tenant="default")
        spec = ScheduleSpec(triggers.IntervalTrigger(3_600_000), HttpTarget("http://x.example"))
        async with ClockworkClient(settings) as client:
            for first in range(0, 2500, 500):  # 2,500 unlabelled keys sort first
                await client.create_many([(f"a/{i:05d}", spec) for i in range(first, first + 500)])
            await client.create_many([(f"z/{i}", spec, {"team": "t3"}) for i in range(3)])
            # A set term is checked row by row, within the call's budget of rows.
            query = ScheduleQuery(selector=parse_selector("team in (t3,t4)"))
            direct = await client.list(page_size=50, query=query)
        assert direct.items == () and direct.next_page_token  # one call answers short
        url = f"http://127.0.0.1:{node.http.port}"
        async with (
            aiohttp.ClientSession(url, cookies={"clockwork_tenant": "default"}) as session,
            session.get("/ui/schedules", params={"selector": "team in (t3,t4)"}) as reply,
        ):
            return await reply.text()


async def test_a_sparse_filter_fills_its_page_past_the_apis_short_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fill is bounded by calls and by time; a slow machine must not end it early.
    monkeypatch.setattr(pages, "FILL_BUDGET_S", 60.0)
    page = await _sparse_filter_page(tmp_path)
    assert [f"z/{i}" in page for i in range(3)] == [True] * 3


async def test_a_spent_fill_budget_shows_what_it_found_and_a_next_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pages, "FILL_BUDGET_S", 0.0)
    page = await _sparse_filter_page(tmp_path)
    assert [f"z/{i}" in page for i in range(3)] == [False] * 3
    assert 'id="next-page"' in page
