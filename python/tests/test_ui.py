"""The proxy's web dashboard (`/ui/`) in headless Chromium, against a playground with auth on
(1 proxy, 2 targets) whose proxy serves its embedded copy of `proxy/ui/`.

- The page and its two assets are public, `/ui` redirects to `/ui/`, and what the binary
  serves is the source in `proxy/ui/` (a stale build fails here).
- A wrong password shows an error and no cluster data.
- On a cluster without auth (the shared `cluster` fixture) there is no login form: the map shows
  at once.
- After logging in as the admin: every node of the cluster map has a card and the primary is
  marked; under a GET load the ops, throughput and latency charts gain samples and their latest
  values show the load (GET ops/s and p99 above zero, bytes out above 100 kB/s), and a target's
  card shows a non-zero GET rate; every target's capacity is shown with its mountpaths, and the
  bucket with its object count; a running ETL job (one object at a time per target, a second
  each) is listed as running.
- No script errors in the browser's console.
- A screenshot of the dashboard is saved (`build/ui-screenshots/` under the repository, or
  `$GRIST_UI_SCREENSHOT_DIR`) and checked to be a PNG.

Chromium and chromedriver are Debian's (`scripts/test.sh` installs them); selenium comes with
the package's `test` extra.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from conftest import GRISTD, REPO, STARTUP_TIMEOUT, _pick_base_port, _stop
from gristmill import Client

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
UI_SOURCE = REPO / "proxy" / "ui"
SCREENSHOTS = Path(os.environ.get("GRIST_UI_SCREENSHOT_DIR", REPO / "build" / "ui-screenshots"))
# Generous: the page polls every 2 s, and debug binaries on a busy machine are slow.
WAIT = 60


@pytest.fixture(scope="module")
def auth_playground():
    """`gristd playground --auth` (1 proxy, 2 targets); yields (endpoint, admin password). The
    playground prints the first admin's password once, after the cluster is up."""
    if not GRISTD.exists():
        pytest.fail(f"gristd binary not found at {GRISTD}: run `cargo build --bins` (or set GRISTD_BIN)")
    data_dir = tempfile.mkdtemp(prefix="gristmill-ui-")
    base = _pick_base_port()
    out = Path(data_dir, "playground.out")
    # The proxy must serve its embedded copy of the page, not one from a --ui-dir.
    env = {k: v for k, v in os.environ.items() if k != "GRISTD_UI_DIR" and not k.startswith("GRISTD_S3_")}
    with open(out, "wb") as log:
        proc = subprocess.Popen(
            [str(GRISTD), "playground", "--auth", "--targets", "2", "--data-dir", data_dir, "--port", str(base)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        password = None
        while password is None:
            m = re.search(r"user: admin\s+password: (\S+)", out.read_text(errors="replace"))
            if m:
                password = m.group(1)
                break
            assert proc.poll() is None, f"playground exited:\n{out.read_text(errors='replace')[-4000:]}"
            assert time.monotonic() < deadline, f"playground not up after {STARTUP_TIMEOUT}s; logs in {data_dir}"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{base}", password
    finally:
        _stop(proc)
        if os.environ.get("GRIST_KEEP_DATA"):
            print(f"cluster data kept in {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def admin(auth_playground) -> Client:
    endpoint, password = auth_playground
    status, body = _post_json(f"{endpoint}/v1/auth/login", {"name": "admin", "password": password})
    assert status == 200, f"login as admin: {status} {body}"
    c = Client(endpoint, token=json.loads(body)["token"])
    yield c
    c.close()


@pytest.fixture
def browser():
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            pytest.fail(f"{path} not found: scripts/test.sh installs it (Debian chromium, chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1300"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    yield driver
    driver.quit()


def _post_json(url: str, body: dict) -> tuple[int, str]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def _log_in(driver, endpoint: str, name: str, password: str) -> None:
    driver.get(f"{endpoint}/ui/")
    WebDriverWait(driver, WAIT).until(lambda d: d.find_element(By.ID, "login").is_displayed())
    driver.find_element(By.ID, "login-name").send_keys(name)
    driver.find_element(By.ID, "login-password").send_keys(password)
    driver.find_element(By.ID, "login-submit").click()


def _node_cards(driver) -> set[str]:
    return {e.get_attribute("data-node-id") for e in driver.find_elements(By.CSS_SELECTOR, "[data-testid=node]")}


def _chart(driver, chart_id: str) -> tuple[int, float | None]:
    """A chart's number of plotted samples and its first series' latest value."""
    canvas = driver.find_element(By.ID, chart_id)
    last = canvas.get_attribute("data-last")
    return int(canvas.get_attribute("data-points")), float(last) if last else None


@contextlib.contextmanager
def _get_load(bucket):
    """GETs of a few 256 KiB objects in a loop on a thread until the block ends."""
    names = [f"load/{i}" for i in range(8)]
    for n in names:
        bucket.object(n).put(os.urandom(256 << 10))
    stop = threading.Event()
    errors: list[BaseException] = []

    def run():
        while not stop.is_set():
            for n in names:
                try:
                    bucket.object(n).get()
                except BaseException as e:  # reported after the block, not lost on the thread
                    errors.append(e)
                    return

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(timeout=30)
    assert not errors, f"GET load failed: {errors[0]!r}"


def slow_copy(data, path, args):
    import time
    time.sleep(1.0)
    return data


def test_assets_are_public_and_the_embedded_copy_is_the_source(auth_playground):
    endpoint, _ = auth_playground
    with urllib.request.urlopen(f"{endpoint}/ui", timeout=10) as r:  # no token; follows the redirect
        assert r.url == f"{endpoint}/ui/"
        served = {"index.html": (r.headers.get_content_type(), r.read())}
    for name in ("app.js", "style.css"):
        with urllib.request.urlopen(f"{endpoint}/ui/{name}", timeout=10) as r:
            served[name] = (r.headers.get_content_type(), r.read())
    assert {n: t for n, (t, _) in served.items()} == {
        "index.html": "text/html", "app.js": "text/javascript", "style.css": "text/css"}
    for name, (_, body) in served.items():
        assert body == (UI_SOURCE / name).read_bytes(), \
            f"/ui/{name} is not proxy/ui/{name}: gristd embeds the page when built, rebuild it"


def test_wrong_password_shows_an_error_and_no_data(auth_playground, browser):
    endpoint, _ = auth_playground
    _log_in(browser, endpoint, "admin", "not-the-password")
    error = WebDriverWait(browser, WAIT).until(
        lambda d: d.find_element(By.ID, "login-error") if d.find_element(By.ID, "login-error").is_displayed() else None)
    assert error.text.strip()
    assert not browser.find_element(By.ID, "dashboard").is_displayed()
    assert browser.find_elements(By.CSS_SELECTOR, "[data-testid=node]") == []
    assert browser.execute_script("return sessionStorage.getItem('gristmill.token')") is None


def test_without_auth_there_is_no_login_form(cluster, browser):
    browser.get(f"{cluster}/ui/")
    smap = Client(cluster).cluster_map()
    ids = set(smap["pmap"]) | set(smap["tmap"])
    WebDriverWait(browser, WAIT).until(lambda d: ids <= _node_cards(d), f"node cards for {ids}")
    assert not browser.find_element(By.ID, "login").is_displayed()
    assert not browser.find_element(By.ID, "logout").is_displayed()


def test_dashboard_shows_the_map_live_load_and_a_running_job(auth_playground, admin, browser):
    endpoint, password = auth_playground
    _log_in(browser, endpoint, "admin", password)
    WebDriverWait(browser, WAIT).until(lambda d: d.find_element(By.ID, "dashboard").is_displayed())
    assert not browser.find_element(By.ID, "login").is_displayed()

    # Every node of the map has a card.
    smap = admin.cluster_map()
    ids = set(smap["pmap"]) | set(smap["tmap"])
    assert len(smap["pmap"]) >= 1 and len(smap["tmap"]) == 2

    WebDriverWait(browser, WAIT).until(lambda d: ids <= _node_cards(d), f"node cards for {ids}")
    primary = browser.find_element(By.CSS_SELECTOR, "[data-testid=node] [data-testid=primary]")
    assert primary.find_element(By.XPATH, "ancestor::*[@data-testid='node']").get_attribute("data-node-id") == \
        smap["proxy_si"]["daemon_id"]

    # Under a GET load, the charts gain samples and show it: GET ops/s and p99 latency above
    # zero, bytes out above what an idle cluster sends (its own metrics scrapes, a few KiB/s).
    bucket = admin.bucket(f"ui-{uuid.uuid4().hex[:8]}")
    bucket.create()
    with _get_load(bucket):
        for chart, floor in (("chart-ops", 0), ("chart-throughput", 100_000), ("chart-latency", 0)):
            points_before, _ = _chart(browser, chart)

            def shows_load(d, chart=chart, floor=floor, points_before=points_before):
                points, last = _chart(d, chart)
                return points > points_before and last is not None and last > floor

            WebDriverWait(browser, WAIT).until(shows_load, f"{chart} under load")
        # The per-node numbers are there too: some target shows a non-zero GET rate.
        WebDriverWait(browser, WAIT).until(lambda d: any(
            m.text != "—" and float(m.text) > 0
            for m in d.find_elements(By.CSS_SELECTOR, "[data-role=target] [data-metric=get_ops]")))

    # Capacity: every target with its mountpaths; the bucket with its objects.
    for t in smap["tmap"]:
        card = browser.find_element(By.CSS_SELECTOR, f"[data-testid=capacity-target][data-node-id='{t}']")
        assert card.find_elements(By.CSS_SELECTOR, "[data-testid=mountpath]"), f"no mountpaths for {t}"
    WebDriverWait(browser, WAIT).until(lambda d: d.find_elements(
        By.CSS_SELECTOR, f"[data-testid=bucket][data-bucket='ais://{bucket.name}']"))
    row = browser.find_element(By.CSS_SELECTOR, f"[data-testid=bucket][data-bucket='ais://{bucket.name}']")
    assert row.find_elements(By.TAG_NAME, "td")[1].text == "8"

    # A job that runs for a while (one object at a time per target, a second each) is listed
    # as running while it runs.
    names = [f"etl/{i:02d}" for i in range(30)]
    for n in names:
        bucket.object(n).put(b"x")
    etl = admin.etl(f"slow-{uuid.uuid4().hex[:6]}").init_code(slow_copy)
    job = bucket.transform(etl.name, admin.bucket(f"ui-out-{uuid.uuid4().hex[:8]}"), names=names, num_workers=1)
    try:
        row = WebDriverWait(browser, WAIT).until(lambda d: d.find_elements(
            By.CSS_SELECTOR, f"[data-testid=job][data-job-id='{job.id}'][data-state=running]"))[0]
        assert row.get_attribute("data-kind") == job.status()["kind"]

        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shot = SCREENSHOTS / "dashboard.png"
        assert browser.save_screenshot(str(shot))
        data = shot.read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000
        # No script errors along the way (the 401s before the login are network entries).
        assert [e for e in browser.get_log("browser") if e.get("source") == "javascript"] == []
    finally:
        job.stop()
        etl.delete()


def test_sdk_login_keeps_the_token(auth_playground):
    """``Client.login``: a wrong password is refused (401), a right one returns a token the
    client keeps for its next requests; ``whoami`` names the user. (Here for the auth-on
    playground this module starts.)"""
    from gristmill import Unauthorized

    endpoint, password = auth_playground
    c = Client(endpoint)
    with pytest.raises(Unauthorized):
        c.login("admin", "not-the-password")
    with pytest.raises(Unauthorized):
        c.list_buckets()
    token = c.login("admin", password, ttl="1h")
    assert token and c.token == token
    assert c.whoami()["name"] == "admin"
    c.bucket("login-made").create(exist_ok=True)
    assert "login-made" in [b.name for b in Client(endpoint, token=token).list_buckets()]
