"""``GET /``: the front page, in a real headless browser (Debian's chromium and chromium-driver, driven by
selenium): what is served, links that stay on the server, and the form, which encodes a sentence and searches
the demo gallery. Without a browser installed the browser tests skip with the reason (``.ci/run`` installs
one); the page's HTML is checked without one too."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlparse

import httpx
import pytest

from tests.e2e.server import LiveServer, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    srv = start_server(tmp_path_factory.mktemp("front"))
    yield srv
    srv.stop()


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v for k, v in attrs if k in ("href", "src") and v]


def test_page_says_what_is_served_and_links_stay_here(server: LiveServer) -> None:
    r = httpx.get(server.url + "/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    for shown in ("demo-lngru", "demo-images", "ready", "/docs", "/metrics", 'id="try"'):
        assert shown in r.text, shown
    links = _Links()
    links.feed(r.text)
    assert {"/docs", "/redoc", "/metrics", "/info"} <= set(links.urls)
    for url in links.urls:  # nothing from a CDN, and every link answers
        full = urljoin(server.url + "/", url)
        assert urlparse(full).netloc == urlparse(server.url).netloc, url
        assert httpx.get(full).status_code == 200, url
    assert (
        httpx.post(server.url + "/", json={"inputs": "a red circle"}).status_code == 200
    )  # TEI's POST / stays


# -- galleries of models this server does not serve (a shared galleries directory) ------------------
class _Page(HTMLParser):
    """What the page offers: each gallery row's usability, the form's gallery options and the selected one."""

    def __init__(self) -> None:
        super().__init__()
        self.usable: dict[str, str] = {}
        self.options: list[str] = []
        self.selected: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and a.get("data-gallery"):
            self.usable[str(a["data-gallery"])] = str(a.get("data-usable"))
        if tag == "option":
            self.options.append(str(a.get("value")))
            if "selected" in a:
                self.selected = str(a.get("value"))


@pytest.fixture(scope="module")
def shared(artifacts: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The demo server, on a galleries directory that also holds an images gallery of another model (made by
    another server on the same directory), named to sort first."""
    tmp = tmp_path_factory.mktemp("shared-galleries")
    other = start_server(tmp, "--models", str(artifacts["oe_order_gru"]))
    try:
        dim_image = httpx.get(other.url + "/models").json()["models"][0]["dim_image"]
        assert httpx.post(other.url + "/galleries", json={"name": OTHER, "kind": "images"}).status_code == 201
        items = {"items": [{"id": "x1", "image": [0.5] * dim_image}]}
        assert httpx.post(f"{other.url}/galleries/{OTHER}/items", json=items).status_code == 200
    finally:
        other.stop()
    srv = start_server(tmp)
    yield srv
    srv.stop()


OTHER = "aaa-other-model"


def test_page_says_which_galleries_it_can_search_and_preselects_one(shared: LiveServer) -> None:
    """A gallery of a model the server does not serve was listed "ok" and preselected: "Run" answered 422
    gallery_mismatch. The page now marks it unusable (with why), offers only usable ones, selects one."""
    html = httpx.get(shared.url + "/").text
    page = _Page()
    page.feed(html)
    assert page.usable == {OTHER: "no", "demo-images": "yes"}, page.usable
    assert "which this server does not serve" in html
    assert page.options == ["demo-images"] and page.selected == "demo-images"
    query = {"query": {"text": "a red circle on the left"}, "k": 5}  # what the form sends
    r = httpx.post(shared.url + "/retrieve", json={"gallery": page.selected, **query})
    assert r.status_code == 200 and len(r.json()["results"]) == 5, r.text
    r = httpx.post(shared.url + "/retrieve", json={"gallery": OTHER, **query})
    assert r.status_code == 422 and r.json()["error"]["code"] == "gallery_mismatch"  # "no" was right


def test_browser_searches_the_preselected_gallery(browser: object, shared: LiveServer) -> None:
    from selenium.webdriver.remote.webdriver import WebDriver

    assert isinstance(browser, WebDriver)
    browser.get(shared.url + "/")
    found = _run_form(browser, "retrieve", "a red circle on the left")
    assert "error" not in found and len([line for line in found.splitlines() if "test-" in line]) == 5, found


# -- in a real browser -------------------------------------------------------------------------------
def _browser() -> tuple[str, str] | None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is a dev dependency")
    found = _browser()
    if found is None:
        pytest.skip(
            "no chromium + chromedriver installed (apt-get install chromium chromium-driver; .ci/run does)"
        )
    os.environ["SE_OFFLINE"] = "true"  # selenium-manager must not download anything
    chromium, driver = found
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    chrome = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver))
    chrome.set_page_load_timeout(30)
    yield chrome
    chrome.quit()


def test_browser_shows_models_galleries_and_loads_nothing_from_elsewhere(
    browser: object, server: LiveServer
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    assert isinstance(browser, WebDriver)
    browser.get(server.url + "/")
    assert browser.title == "lnserve"
    assert "demo-lngru" in browser.find_element(By.ID, "models").text
    assert "demo-images" in browser.find_element(By.ID, "galleries").text
    resources = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert all(urlparse(u).netloc == urlparse(server.url).netloc for u in resources), resources
    browser.find_element(By.LINK_TEXT, "API reference (/docs)").click()
    assert urlparse(browser.current_url).path == "/docs"


def _run_form(browser: object, job: str, text: str) -> str:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import WebDriverWait

    assert isinstance(browser, WebDriver)
    box = browser.find_element(By.ID, "text")
    box.clear()
    box.send_keys(text)
    browser.find_element(By.CSS_SELECTOR, f"input[name=job][value={job}]").click()
    browser.find_element(By.ID, "go").click()
    result = browser.find_element(By.ID, "result")
    WebDriverWait(browser, 30).until(
        lambda _: result.get_attribute("data-done") == job or "error" in result.text
    )
    return str(result.text)


def test_browser_form_encodes_and_searches(browser: object, server: LiveServer) -> None:
    from selenium.webdriver.remote.webdriver import WebDriver

    assert isinstance(browser, WebDriver)
    browser.get(server.url + "/")
    encoded = _run_form(browser, "encode", "a blue square")
    assert "demo-lngru" in encoded and "64" in encoded, encoded
    browser.get(server.url + "/")
    found = _run_form(browser, "retrieve", "a red circle on the left")
    rows = [line for line in found.splitlines() if "test-" in line]
    assert len(rows) == 5 and "lower is better" in found, found
    expected = httpx.post(
        server.url + "/retrieve",
        json={"gallery": "demo-images", "query": {"text": "a red circle on the left"}, "k": 5},
    ).json()["results"]
    assert [row.split()[1] for row in rows] == [hit["id"] for hit in expected]
