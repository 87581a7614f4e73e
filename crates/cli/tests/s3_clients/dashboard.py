"""Drives cairn's dashboard in headless Chromium (Selenium, Debian's chromium
and chromedriver): loads the page read-only, checks actions are refused,
enters an operator key, starts a scrub, a snapshot, a gc and a check from
the page and watches them finish (gc and check show a line of figures, the
whole answer folded, nothing wider than the page), starts a snapshot with a
bad name and sees it refused (not failed), saving a screenshot at each
stage. Prints the figures
the page showed, as JSON, for the caller to compare with `cairn stats`."""

import json
import os
import re
import sys
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

endpoint = os.environ["ENDPOINT"]
shots = os.environ["SHOTS"]
page = endpoint + "/-/"

# Without a key, starting a job is refused and nothing runs.
req = urllib.request.Request(endpoint + "/-/api/jobs", data=b'{"kind":"scrub"}', method="POST")
try:
    urllib.request.urlopen(req)
    sys.exit("a job started without a key")
except urllib.error.HTTPError as e:
    assert e.code == 403, e.code
# A read-only key is no operator either.
req.add_header("Authorization", "Cairn %s:%s" % (os.environ["RO_ID"], os.environ["RO_SECRET"]))
try:
    urllib.request.urlopen(req)
    sys.exit("a job started with a read-only key")
except urllib.error.HTTPError as e:
    assert e.code == 403, e.code

opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1800"]:
    opts.add_argument(a)
drv = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
wait = WebDriverWait(drv, 60)
try:
    drv.get(page)
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "1")
    value = lambda i: drv.find_element(By.ID, i).get_attribute("data-value")
    shown = {k: value(k) for k in ["logical", "stored", "chunks", "files", "dedup", "compression",
                                   "space-live", "space-versions", "space-other", "space-available"]}
    assert drv.find_element(By.ID, "role").text == "read only"
    assert not drv.find_element(By.ID, "act-scrub").is_enabled()
    # Plots are drawn: the capacity plot has its three series.
    series = drv.find_elements(By.CSS_SELECTOR, "#plot-capacity polyline")
    assert [s.get_attribute("data-series") for s in series] == ["logical", "unique", "stored"], series
    assert drv.find_elements(By.CSS_SELECTOR, "#plot-policies rect"), "no policy bar"
    drv.save_screenshot(os.path.join(shots, "1-read-only.png"))

    drv.find_element(By.ID, "key-id").send_keys(os.environ["KEY_ID"])
    drv.find_element(By.ID, "key-secret").send_keys(os.environ["SECRET"])
    drv.find_element(By.ID, "key-use").click()
    wait.until(lambda d: d.find_element(By.ID, "role").text == "operator")
    assert drv.find_element(By.ID, "act-scrub").is_enabled()

    drv.find_element(By.ID, "act-scrub").click()
    # Tables are redrawn every two seconds: read them whole, in one call.
    def table(id):
        return drv.execute_script(
            "return [...document.querySelectorAll('#' + arguments[0] + ' tbody tr')]"
            ".map(r => [...r.cells].map(c => c.textContent))", id)

    def job(kind):
        rows = [r for r in table("jobs") if r[1] == kind]
        return rows[0] if rows else None

    wait.until(lambda d: job("scrub"))
    drv.save_screenshot(os.path.join(shots, "2-scrub-started.png"))
    wait.until(lambda d: job("scrub")[2] == "done")
    scrub = job("scrub")[5]
    assert "containers healthy, 0 repaired, 0 lost" in scrub, scrub
    branches = table("branches")
    assert [(b[0], b[1]) for b in branches] == [("left", "healthy"), ("right", "healthy")], branches
    assert [p[0] for p in table("policies")] == ["mirror:2"], table("policies")
    # Every container is under the one policy.
    containers = drv.execute_script("return document.getElementById('containers').textContent")
    assert table("policies")[0][1] + " containers" == containers, (table("policies"), containers)

    drv.find_element(By.ID, "snapshot-name").send_keys("from-browser")
    drv.find_element(By.ID, "act-snapshot").click()
    wait.until(lambda d: (job("snapshot_create") or [None] * 3)[2] == "done")
    wait.until(lambda d: any(r[0] == "from-browser" for r in table("snapshots")))
    drv.save_screenshot(os.path.join(shots, "3-jobs-done.png"))

    # A gc and a check show a line of key figures, their whole answer
    # folded below it; nothing runs off the page.
    def result(kind):
        return drv.execute_script(
            "const row = [...document.querySelectorAll('#jobs tbody tr')]"
            ".find(r => r.cells[1].textContent === arguments[0]);"
            "const d = row.cells[5].querySelector('details');"
            "return d && {line: d.querySelector('summary').textContent, open: d.open,"
            " whole: d.querySelector('pre').textContent}", kind)

    for kind, button in [("gc", "act-gc"), ("check", "act-check")]:
        drv.find_element(By.ID, button).click()
        wait.until(lambda d: (job(kind) or [None] * 3)[2] == "done")
    gc, check = result("gc"), result("check")
    assert re.fullmatch(r"[\d.]+ \S+ freed: \d+ containers? reclaimed, \d+ chunks? copied forward, \d+ chunks? live", gc["line"]), gc
    assert json.loads(gc["whole"])["marked_chunks"] >= 0 and not gc["open"], gc
    assert re.fullmatch(r"clean: (\d+) of \1 containers sound, \d+ chunks \([\d.]+ \S+\) verified", check["line"]), check
    # Opened, a result stays open across the table's redraws, and stays
    # within the page.
    drv.execute_script(
        "const row = [...document.querySelectorAll('#jobs tbody tr')].find(r => r.cells[1].textContent === 'check');"
        "row.cells[5].querySelector('summary').click(); row.dataset.drawn = 'before'")
    wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, "#jobs tr[data-drawn]"))
    assert result("check")["open"], "an opened result closed at the redraw"
    overflow = drv.execute_script(
        "const e = document.documentElement; return [e.scrollWidth, e.clientWidth]")
    assert overflow[0] <= overflow[1], ("the page is wider than the window", overflow)

    # A typo is refused, and shows as refused, not as a failed job.
    drv.find_element(By.ID, "snapshot-name").clear()
    drv.find_element(By.ID, "snapshot-name").send_keys("bad/name")
    drv.find_element(By.ID, "act-snapshot").click()
    wait.until(lambda d: (job("snapshot_create") or [None] * 3)[2] not in (None, "running", "done"))
    refused = job("snapshot_create")
    assert refused[2] == "refused" and 'invalid snapshot name "bad/name"' in refused[5], refused
    assert not [r for r in table("jobs") if r[2] == "failed"], table("jobs")
    drv.save_screenshot(os.path.join(shots, "4-results-and-a-refusal.png"))
    print(json.dumps({"shown": shown, "scrub": scrub, "gc": gc["line"], "check": check["line"]}))
finally:
    drv.quit()
