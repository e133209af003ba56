"""The chat page at / in Debian's headless Chromium (chromium, chromium-driver) through selenium:
two turns typed and sent as a user would, each reply streamed into the page until done; the first
equals the greedy reply the API gives the same conversation, and the second turn's prompt holds the
first (its cached tokens are counted). --no-webui serves no page. With SLAKE_WEBUI_SCREENSHOT=FILE
the page is saved as a PNG (docs/webui.png comes from this)."""
import json
import os
import shutil
import time
import unittest
import urllib.error
import urllib.request

from harness import CHATML, STORIES, Server

DRIVER = shutil.which("chromedriver")
BROWSER = shutil.which("chromium")


def post(server, path, body):
    req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


@unittest.skipUnless(DRIVER and BROWSER, "Debian's chromium and chromium-driver are not installed (scripts/setup.sh installs them)")
@unittest.skipUnless(os.path.exists(STORIES), f"shared material missing: {STORIES}")
class ChatPage(unittest.TestCase):
    def test_two_turns_stream_into_the_page(self):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By

        server = Server(STORIES, "-c", "1024", "-t", "1", "--chat-template-file", CHATML)
        opts = webdriver.ChromeOptions()
        opts.binary_location = BROWSER
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1100,700"):
            opts.add_argument(a)
        driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
        try:
            driver.get(server.url + "/")
            self.assertEqual(driver.title, "slake")
            for field, value in (("temp", "0"), ("max", "24"), ("system", "Be brief.")):
                el = driver.find_element(By.ID, field)
                el.clear()
                el.send_keys(value)

            def turn(text):
                n = len(driver.find_elements(By.CSS_SELECTOR, ".msg.assistant"))
                # Each change to the page's reply, as it happens: a reply that streams grows in steps.
                # The response is handed to the page one server-sent event per read, 20 ms apart (a
                # fast reply may otherwise arrive in one read), so each event can be seen rendered.
                driver.execute_script("""
                    if (!window.__paced) {
                      window.__paced = true;
                      const fetch0 = window.fetch;
                      window.fetch = async (...args) => {
                        const r = await fetch0(...args);
                        if (!r.body) return r;
                        const reader = r.body.getReader(), dec = new TextDecoder(), enc = new TextEncoder();
                        const body = new ReadableStream({async start(c) {
                          for (;;) {
                            const {done, value} = await reader.read();
                            if (done) break;
                            for (const ev of dec.decode(value, {stream: true}).split(/(?<=\\n\\n)/)) {
                              c.enqueue(enc.encode(ev));
                              await new Promise(res => setTimeout(res, 20));
                            }
                          }
                          c.close();
                        }});
                        return new Response(body, {status: r.status, statusText: r.statusText, headers: r.headers});
                      };
                    }
                    window.__lengths = [];
                    new MutationObserver(() => {
                      const m = document.querySelectorAll('.msg.assistant');
                      if (m.length) window.__lengths.push(m[m.length - 1].textContent.length);
                    }).observe(document.body, {childList: true, subtree: true, characterData: true});""")
                driver.find_element(By.ID, "input").send_keys(text)
                driver.find_element(By.ID, "send").click()
                deadline = time.time() + 60
                while time.time() < deadline:
                    done = driver.find_elements(By.CSS_SELECTOR, ".msg.assistant[data-done='1']")
                    if len(done) > n:
                        return done[-1].text
                    time.sleep(0.1)
                self.fail("no reply in the page within 60 s")

            first = turn("Once upon a time")
            lengths = driver.execute_script("return window.__lengths")
            self.assertGreaterEqual(len(set(lengths) - {0}), 3, f"the reply did not grow as it streamed: {lengths}")
            want = post(server, "/v1/chat/completions", {
                "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Once upon a time"}],
                "temperature": 0, "max_tokens": 24})["choices"][0]["message"]["content"]
            self.assertEqual(first, want.strip())  # the page shows the text; the DOM trims its ends
            second = turn("And then?")
            self.assertTrue(second and not second.startswith("error"), second)
            metas = driver.find_elements(By.CSS_SELECTOR, ".meta")
            self.assertIn("cached", metas[-1].text)
            self.assertIn("KV cache held", driver.find_element(By.ID, "kv").text)
            if os.environ.get("SLAKE_WEBUI_SCREENSHOT"):
                driver.save_screenshot(os.environ["SLAKE_WEBUI_SCREENSHOT"])
        finally:
            driver.quit()
            server.stop()

    def test_no_webui(self):
        server = Server(STORIES, "-c", "256", "-t", "1", "--no-webui")
        try:
            with self.assertRaises(urllib.error.HTTPError) as cm:
                urllib.request.urlopen(server.url + "/", timeout=10)
            self.assertEqual(cm.exception.code, 404)
        finally:
            server.stop()


if __name__ == "__main__":
    unittest.main()
