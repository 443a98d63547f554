"""The web UI at / driven in a real headless browser (Debian's chromium + chromium-driver through selenium, which
.ci/run installs), on the real server and the shipped model. Screenshots of each state go to
$PYLLM_WEBUI_SHOTS (default: a temporary folder) to be looked at."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from server_util import Server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver")
try:
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # selenium is in the test extra
    webdriver = None

needs_browser = pytest.mark.skipif(
    not (CHROMIUM and DRIVER and webdriver),
    reason="needs chromium, chromedriver and selenium (apt-get install chromium chromium-driver; .ci/run does)")

MTP = ("--spec-type", "draft-mtp", "--spec-draft-n-max", "3")


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    d = Path(os.environ.get("PYLLM_WEBUI_SHOTS") or tmp_path_factory.mktemp("webui-shots"))
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def browser():
    if not (CHROMIUM and DRIVER and webdriver):
        pytest.skip("needs chromium, chromedriver and selenium")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,800"):
        opts.add_argument(a)
    drv = webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER), options=opts)
    drv.set_page_load_timeout(20)
    yield drv
    drv.quit()


@pytest.fixture(scope="module")
def srv():
    with Server(*MTP, "--metrics", "-c", "4096") as s:
        yield s


def wait(drv, cond, timeout=20, what="condition"):
    return WebDriverWait(drv, timeout).until(lambda d: cond(d), message="timed out waiting for " + what)


def fresh(drv, url):
    drv.get(url)
    drv.execute_script("localStorage.clear()")
    drv.get(url)
    wait(drv, lambda d: "n_ctx" in d.find_element(By.ID, "model-info").text, what="/props in the header")


def set_field(drv, id_, value):
    el = drv.find_element(By.ID, id_)
    el.clear()
    el.send_keys(str(value))
    drv.execute_script("arguments[0].dispatchEvent(new Event('change'))", el)


def send(drv, text):
    box = drv.find_element(By.ID, "input")
    box.send_keys(text)
    drv.find_element(By.ID, "send").click()


def last_assistant(drv):
    return drv.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1]


def idle(drv):
    return not drv.find_element(By.ID, "send").get_attribute("hidden")


@needs_browser
def test_chat_streams_shows_mtp_stats_stops_and_persists(srv, browser, shots):
    drv = browser
    fresh(drv, srv.url + "/")
    assert "draft-mtp n_max 3" in drv.find_element(By.ID, "model-info").text
    set_field(drv, "s-temperature", 0)
    set_field(drv, "s-max_tokens", 48)
    # count the distinct lengths the answer passes through: streamed text grows in several steps
    drv.execute_script("""
        window.__lens = new Set();
        new MutationObserver(() => { const m = document.querySelectorAll('.msg.assistant .content');
            if (m.length) window.__lens.add(m[m.length - 1].textContent.length); })
          .observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});""")
    send(drv, "Tell me a story about a lighthouse.")
    wait(drv, lambda d: last_assistant(d).find_element(By.CSS_SELECTOR, ".content").text.strip(), what="streamed text")
    wait(drv, idle, what="the answer to finish")
    drv.save_screenshot(str(shots / "1-chat-streamed.png"))
    assert drv.execute_script("return window.__lens.size") >= 3
    msg = last_assistant(drv)
    stats = msg.find_element(By.CSS_SELECTOR, ".stats").text
    assert "tok/s" in stats and "48 tokens" in stats, stats
    mtp = msg.find_element(By.CSS_SELECTOR, ".stats .mtp").text
    assert mtp.startswith("MTP: drafted ") and "accepted" in mtp and "%" in mtp, mtp
    # --metrics: the per-position acceptance bar with one bar per draft position
    assert len(msg.find_elements(By.CSS_SELECTOR, ".posbar i")) == 3
    assert "per position" in stats

    # stop: a long generation, stopped while it streams
    set_field(drv, "s-max_tokens", 3000)
    send(drv, "Now a much longer one.")
    wait(drv, lambda d: len(last_assistant(d).find_element(By.CSS_SELECTOR, ".content").text) > 10, what="streaming")
    drv.find_element(By.ID, "stop").click()
    wait(drv, idle, timeout=10, what="the stop to take effect")
    drv.save_screenshot(str(shots / "2-chat-stopped.png"))
    assert "stopped" in last_assistant(drv).find_element(By.CSS_SELECTOR, ".stats").text
    stopped_text = last_assistant(drv).find_element(By.CSS_SELECTOR, ".content").text
    assert stopped_text

    # the server finished the cancelled request: the next one runs at once
    # reload: the conversation comes back from localStorage
    drv.refresh()
    wait(drv, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".msg")) == 4, what="the conversation after reload")
    drv.save_screenshot(str(shots / "3-chat-reloaded.png"))
    items = drv.find_elements(By.CSS_SELECTOR, "#conv-list li")
    assert len(items) == 1 and "lighthouse" in items[0].text
    assert drv.find_elements(By.CSS_SELECTOR, ".msg.assistant .stats .mtp")
    assert last_assistant(drv).find_element(By.CSS_SELECTOR, ".content").text == stopped_text

    # regenerate replaces the last answer
    set_field(drv, "s-max_tokens", 8)
    drv.find_element(By.ID, "regen").click()
    wait(drv, lambda d: "8 tokens" in last_assistant(d).find_element(By.CSS_SELECTOR, ".stats").text,
         what="the regenerated answer")
    assert len(drv.find_elements(By.CSS_SELECTOR, ".msg")) == 4


@needs_browser
def test_markdown_is_escaped_and_rendered(srv, browser):
    drv = browser
    fresh(drv, srv.url + "/")
    html = drv.execute_script("return markdown(arguments[0])",
                              "<img src=x onerror=alert(1)> **bold** `x<y`\n\n- a\n- b\n\n```js\nlet s = '<b>';\n```")
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<strong>bold</strong>" in html and "<code>x&lt;y</code>" in html
    assert "<ul><li>a</li><li>b</li></ul>" in html
    assert '<pre><code class="lang-js">let s = &#39;&lt;b&gt;&#39;;</code></pre>' in html
    # links only to http(s); a javascript: URL stays text
    assert "<a " not in drv.execute_script("return markdown('[x](javascript:alert(1))')")


@needs_browser
def test_nmax_page_runs_against_this_server(srv, browser, shots):
    drv = browser
    fresh(drv, srv.url + "/")
    drv.find_element(By.ID, "tab-bench").click()
    wait(drv, lambda d: d.find_elements(By.CSS_SELECTOR, "#bench-tasks input"), what="the bench tasks")
    assert "--spec-draft-n-max 3" in drv.find_element(By.ID, "bench-server").text
    set_field(drv, "b-n", 24)
    set_field(drv, "b-reps", 1)
    drv.find_element(By.ID, "bench-run").click()
    wait(drv, lambda d: d.find_element(By.ID, "bench-status").text in ("done.",) or
         d.find_element(By.ID, "bench-status").text.startswith("error"), what="the bench run")
    assert drv.find_element(By.ID, "bench-status").text == "done."
    drv.save_screenshot(str(shots / "4-nmax-page.png"))
    cells = [c.text for c in drv.find_elements(By.CSS_SELECTOR, "#bench-table tbody tr td")]
    assert cells[0] == "code" and cells[1] == "3" and float(cells[3]) > 0, cells
    assert int(cells[5]) > 0 and cells[7].endswith("%")


@needs_browser
def test_api_key_asked_once_and_kept(browser, shots):
    with Server(*MTP, "--api-key", "sekret") as s:
        assert s.get("/props").status_code == 401
        assert s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}).status_code == 401
        assert s.get("/").status_code == 200  # the UI files are public, as llama-server's
        drv = browser
        drv.get(s.url + "/")
        drv.execute_script("localStorage.clear()")
        drv.get(s.url + "/")
        form = wait(drv, lambda d: d.find_element(By.ID, "key-form").is_displayed() and d.find_element(By.ID, "key-form"),
                    what="the key form")
        drv.find_element(By.ID, "key-input").send_keys("wrong")
        drv.find_element(By.ID, "key-submit").click()
        wait(drv, lambda d: "did not accept" in d.find_element(By.ID, "key-error").text, what="the wrong-key message")
        drv.save_screenshot(str(shots / "5-api-key-form.png"))
        drv.find_element(By.ID, "key-input").clear()
        drv.find_element(By.ID, "key-input").send_keys("sekret")
        drv.find_element(By.ID, "key-submit").click()
        wait(drv, lambda d: "n_ctx" in d.find_element(By.ID, "model-info").text, what="/props with the key")
        assert not form.is_displayed()
        set_field(drv, "s-temperature", 0)  # greedy: the UI's default temperature could end the answer before 8 tokens
        set_field(drv, "s-max_tokens", 8)
        send(drv, "Hi")
        wait(drv, lambda d: "8 tokens" in last_assistant(d).find_element(By.CSS_SELECTOR, ".stats").text,
             what="an answer with the key")
        drv.refresh()  # kept in the browser: no second question
        wait(drv, lambda d: "n_ctx" in d.find_element(By.ID, "model-info").text, what="/props after reload")
        assert not drv.find_element(By.ID, "key-form").is_displayed()
        drv.save_screenshot(str(shots / "6-api-key-accepted.png"))


@needs_browser
def test_api_prefix(browser, shots):
    with Server("--api-prefix", "/llm", wait=False) as s:
        s.url += "/llm"
        s.wait_ready()
        s.url = s.url[:-4]
        assert s.get("/llm/props").status_code == 200
        assert s.get("/").status_code == 404
        r = s.get("/llm", follow_redirects=False)
        assert r.status_code in (301, 307) and r.headers["location"].endswith("/llm/")
        fresh(browser, s.url + "/llm/")
        set_field(browser, "s-temperature", 0)  # greedy: the UI's default temperature could end the answer before 6 tokens
        set_field(browser, "s-max_tokens", 6)
        send(browser, "Hi")  # the chat request goes to /llm/v1/chat/completions
        wait(browser, lambda d: "6 tokens" in last_assistant(d).find_element(By.CSS_SELECTOR, ".stats").text,
             what="an answer under the prefix")
        browser.save_screenshot(str(shots / "7-api-prefix.png"))


def test_no_webui_and_path(tmp_path):
    with Server("--no-webui") as s:
        r = s.get("/")
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
        assert s.get("/app.js").status_code == 404
        sw = s.get("/sw.js")  # a self-unregistering worker, as llama-server answers with --no-ui
        assert sw.status_code == 200 and "unregister" in sw.text
        assert s.get("/props").json()["ui"] is False
    (tmp_path / "index.html").write_text("<!doctype html><title>mine</title><p>custom page</p>")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("hello")
    (tmp_path.parent / "secret.txt").write_text("outside")
    with Server("--path", str(tmp_path), "--api-key", "k") as s:
        r = s.get("/")
        assert r.status_code == 200 and "custom page" in r.text and r.headers["content-type"].startswith("text/html")
        assert s.get("/sub/a.txt").text == "hello"
        assert s.get("/app.js").status_code == 401  # not a file there: an API path, which needs the key
        key = {"Authorization": "Bearer k"}
        assert s.get("/app.js", headers=key).status_code == 404  # the built-in UI is not served
        for bad in ("/../secret.txt", "/%2e%2e/secret.txt", "/sub/..%2f..%2fsecret.txt"):
            r = httpx.get(s.url + bad, headers=key)
            assert r.status_code == 404 and "outside" not in r.text, bad
        assert s.get("/props").status_code == 401


def test_path_must_be_a_directory(tmp_path):
    p = subprocess.run([sys.executable, "-m", "pyllm.server", "--path", str(tmp_path / "nope"), "--port", "0"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "--path" in p.stderr and "is not a directory" in p.stderr


def test_ui_assets_content_types_and_props():
    with Server(*MTP) as s:
        for path, ctype in (("/", "text/html"), ("/index.html", "text/html"), ("/app.js", "javascript"),
                            ("/style.css", "text/css")):
            r = s.get(path)
            assert r.status_code == 200 and ctype in r.headers["content-type"], (path, r.headers)
        assert "<!doctype html>" in s.get("/").text.lower()
        assert "http://" not in s.get("/").text and "https://" not in s.get("/").text  # nothing from outside
        assert s.get("/props").json()["speculative"] == {"type": "draft-mtp", "n_max": 3, "n_min": 0,
                                                          "p_min": s.get("/props").json()["speculative"]["p_min"],
                                                          "n_max_auto": False, "draft_head_type": None,
                                                          "draft_vocab": 0, "draft_head": "", "accept": "match"}
        assert httpx.get(s.url + "/bench-tasks.json").json()["code"].startswith("Write")
