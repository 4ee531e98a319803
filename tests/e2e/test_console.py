"""The web console in a real browser (Playwright driving Debian's Chromium, headless) against one local
stack for the module: sign in with the dev token, submit from the form, follow a running job's log and
abort it, the credits page, a job whose every text holds markup shown as text with no dialog, and
axe-core's serious or critical findings on each page (none). Screenshots of each page go to the test's
tmp folder (``console-screenshots/``)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import REPO_ROOT, LocalStackProcess, _free_port

sync_api = pytest.importorskip("playwright.sync_api", reason="make test installs playwright (dev group)")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
AXE = REPO_ROOT / "console" / "node_modules" / "axe-core" / "axe.min.js"
CONSOLE_INDEX = REPO_ROOT / "build" / "console" / "index.html"
XSS = "<img src=x onerror=alert(1)>"
XSS_CODE = f"""import os, pathlib
text = {XSS!r}
print(text, flush=True)
pathlib.Path(os.environ["REMOTE_BATCH_OUTPUT_DIR"], text).write_text("x")
text
"""
FOLLOWED_CODE = """import time
for i in range(600):
    print(f"line {i}", flush=True)
    time.sleep(0.5)
"""

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="make test installs chromium (make browser-tools)"),
    pytest.mark.skipif(not CONSOLE_INDEX.is_file(), reason="make console builds the console"),
]


@pytest.fixture(scope="module")
def console_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackProcess]:
    root = tmp_path_factory.mktemp("console-stack")
    process = LocalStackProcess(root / "home", _free_port())
    process.start()
    yield process
    assert process.stop() == 0


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console-screenshots")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def dialogs() -> list[str]:
    """The messages of the dialogs (alert, confirm, prompt) the test's page opened."""
    return []


@pytest.fixture
def page(browser: Any, console_stack: LocalStackProcess, dialogs: list[str]) -> Iterator[Any]:
    context = browser.new_context(base_url=console_stack.endpoint)
    opened = context.new_page()

    def record(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    opened.on("dialog", record)
    yield opened
    context.close()


def sign_in(page: Any, token: str) -> None:
    page.goto("/console/")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Jobs").wait_for()


def serious_findings(page: Any) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it is (injected by the DevTools
    protocol's evaluate, which the page's CSP does not govern)."""
    page.evaluate(AXE.read_text(encoding="utf-8"))
    found: list[dict[str, Any]] = page.evaluate("axe.run().then(r => r.violations)")
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["html"] for n in v["nodes"]]}
        for v in found
        if v["impact"] in ("serious", "critical")
    ]


def check_page(page: Any, shots: Path, name: str, axe_report: dict[str, Any]) -> None:
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    axe_report[name] = serious_findings(page)
    (shots / "axe.json").write_text(json.dumps(axe_report, indent=2), encoding="utf-8")


_axe_report: dict[str, Any] = {}


def test_sign_in_submit_six_times_seven(page: Any, console_stack: LocalStackProcess, shots: Path) -> None:
    # Given the signed-in dev user on the sign-in page
    page.goto("/console/")
    check_page(page, shots, "sign-in", _axe_report)
    sign_in(page, console_stack.tokens["dev"])
    # When they submit 6 * 7 from the form (the estimate shown first)
    page.get_by_role("link", name="Submit").click()
    page.get_by_label("Code").fill("6 * 7")
    page.get_by_label("Machine class").select_option("Basic1x8")
    page.get_by_label("Geo zone").select_option("UnitedStates")
    page.get_by_label("Time constraint").fill("600")
    page.get_by_role("button", name="Estimate").click()
    page.get_by_text("Estimate: 10 credits for 600 s billed.").wait_for()
    check_page(page, shots, "submit", _axe_report)
    page.get_by_role("button", name="Submit").click()
    # Then the job page shows it Succeeded with 42
    page.locator("#result").wait_for(timeout=60_000)
    assert page.locator("#result").text_content() == "42"
    assert page.locator("dd.status-Succeeded").text_content() == "Succeeded"
    job_id = page.locator("#job-id").text_content()
    assert job_id and job_id.startswith("job-")
    assert page.get_by_role("button", name="Abort").is_hidden()
    check_page(page, shots, "job", _axe_report)
    # and the credits moved: the ledger holds its charge
    page.get_by_role("link", name="Credits").click()
    page.get_by_role("link", name=job_id).wait_for()
    # (10000 granted, less the 60-second minimum of Basic1x8 at 60 credits/hour: exactly 1)
    assert page.locator("#balance").text_content() == "Balance: 9999 credits"
    check_page(page, shots, "credits", _axe_report)
    page.get_by_role("link", name="Jobs").click()
    page.get_by_role("link", name=job_id).wait_for()
    check_page(page, shots, "jobs", _axe_report)
    assert _axe_report == {name: [] for name in ("sign-in", "submit", "job", "credits", "jobs")}


def test_a_running_jobs_log_grows_then_abort(
    page: Any, console_stack: LocalStackProcess, shots: Path
) -> None:
    # Given a job printing a line every half second
    job = console_stack.client("dev").submit({"code": FOLLOWED_CODE, "name": "followed"})
    sign_in(page, console_stack.tokens["dev"])
    page.goto(f"/console/#/jobs/{job['jobId']}")
    # When its page is open, Then the log follows it: line 0 first, line 4 later, without a reload
    log = page.locator("#log")
    sync_api.expect(log).to_contain_text("line 0", timeout=60_000)
    sync_api.expect(log).to_contain_text("line 4", timeout=30_000)
    check_page(page, shots, "job-running", _axe_report)
    # When Abort is pressed, Then it ends Terminated, Aborted by user
    page.get_by_role("button", name="Abort").click()
    sync_api.expect(page.locator("dd.status-Terminated")).to_have_text("Terminated", timeout=30_000)
    sync_api.expect(page.get_by_text("Aborted by user", exact=True)).to_be_visible()
    assert _axe_report["job-running"] == []


def test_job_controlled_markup_is_shown_as_text(
    page: Any, console_stack: LocalStackProcess, shots: Path, dialogs: list[str]
) -> None:
    # Given a job whose name, log, result and output name are an <img onerror> tag
    dev = console_stack.client("dev")
    job = dev.submit({"code": XSS_CODE, "name": XSS})
    dev.wait_status(job["jobId"], timeout=60)
    sign_in(page, console_stack.tokens["dev"])
    # When its row and its page are shown
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name=job["jobId"]))
    sync_api.expect(row).to_contain_text(XSS)
    page.get_by_role("link", name=job["jobId"]).click()
    page.locator("#result").wait_for(timeout=30_000)
    # Then each is its text, no <img> element exists on either page, and no dialog opened
    sync_api.expect(page.locator("#log")).to_have_text(XSS)
    assert json.loads(page.locator("#result").text_content() or "") == XSS
    sync_api.expect(page.get_by_role("link", name=XSS)).to_be_visible()
    sync_api.expect(page.locator("dd").filter(has_text=XSS)).to_have_count(1)
    assert page.locator("img").count() == 0
    check_page(page, shots, "job-xss", _axe_report)
    assert dialogs == []
    assert _axe_report["job-xss"] == []
