"""The rendered book: no CDN, and a real browser draws every chart.

These read the site `make test-book` renders from the committed runs ($SPECBENCH_BOOK_BUILD;
`make test` runs it first, `_build` otherwise) and need Debian's chromium
(`scripts/setup.sh --browser`).
"""
import re
import shutil
from pathlib import Path

import pytest

from chapter_outputs import book_build

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parents[1]
HTML = book_build() / "html"
ARTIFACTS = ROOT / "artifacts" / "screenshots"
# The theme (pydata-sphinx-theme) logs this on a first visit, when its stored light/dark
# mode is still empty; it is the theme's notice, not a failure of the page.
KNOWN_THEME_NOTICES = ("Got invalid theme mode: . Resetting to auto.",)
CDN = re.compile(r"https?://(cdn\.jsdelivr\.net|unpkg\.com|cdnjs\.cloudflare\.com|"
                 r"cdn\.plot\.ly|code\.jquery\.com|fonts\.googleapis\.com|"
                 r"cdn\.mathjax\.org|polyfill\.io)")


# Every chart and table must fit the text column, or sit in a scroll box (.sb-scroll, from
# specbench.report.tables and specbench.report.charts) that scrolls sideways and shows its hint.
OVERFLOW_JS = """() => {
  if (window.specbenchMarkOverflow) window.specbenchMarkOverflow();
  const column = document.querySelector("article.bd-article") || document.querySelector("main");
  if (!column) return [];   // the root index.html only redirects
  const col = column.getBoundingClientRect();
  const fits = r => r.left >= col.left - 1 && r.right <= col.right + 1;
  const problems = [];
  column.querySelectorAll(".vega-chart > svg, .vega-chart > canvas, table").forEach((el, i) => {
    const r = el.getBoundingClientRect();
    const what = el.tagName.toLowerCase() === "table" ? "table" : "chart";
    if (what === "chart" && el.getBBox && el.getBBox().width > r.width + 2)
      problems.push(`chart ${i} draws ${Math.round(el.getBBox().width)} px into a ` +
                    `${Math.round(r.width)} px picture: its legend or labels are cut`);
    if (r.width === 0 || fits(r)) return;
    if (what === "chart") {   // a figure fits by its own width; a scroll box does not count
      problems.push(`chart ${i} is ${Math.round(r.width)} px wide in a ` +
                    `${Math.round(col.width)} px column`);
      return;
    }
    const box = el.closest(".sb-scroll");
    const hint = box && box.querySelector(".sb-scroll-hint");
    const scrolls = box && ["auto", "scroll"].includes(getComputedStyle(box).overflowX);
    if (!box || !scrolls || !fits(box.getBoundingClientRect()))
      problems.push(`${what} ${i} is ${Math.round(r.width)} px wide in a ` +
                    `${Math.round(col.width)} px column, with no scroll box`);
    else if (!hint || hint.offsetParent === null)
      problems.push(`${what} ${i} scrolls sideways without a visible hint`);
  });
  // Tables read as a paper's: no index column, no raw snake_case header, no NaN/inf/None
  // or ';'-joined list in a cell (say "—" and why).
  column.querySelectorAll("table").forEach((table, i) => {
    if (table.querySelector("tbody th"))
      problems.push(`table ${i} has an index column`);
    table.querySelectorAll("thead th").forEach(th => {
      const h = th.textContent.trim();
      if (/^[a-z0-9]+(_[a-z0-9]+)+$/.test(h)) problems.push(`table ${i} has a raw header '${h}'`);
    });
    table.querySelectorAll("tbody td").forEach(td => {
      const v = td.textContent.trim();
      if (/^(nan|NaN|-?inf|None|<NA>)$/.test(v) || /^-?[0-9.]+(;-?[0-9.]+)+$/.test(v))
        problems.push(`table ${i} shows '${v}' in a cell`);
    });
  });
  return problems;
}"""


def _built():
    if not (HTML / "index.html").exists():
        pytest.fail(f"{HTML} has no built book: run `make book-from-runs` first")
    return sorted(HTML.glob("book/*.html")) + [HTML / "index.html"]


@pytest.mark.book
def test_built_html_requests_no_cdn():
    offenders = {p.name: CDN.findall(p.read_text(errors="ignore")) for p in HTML.rglob("*.html")} \
        if HTML.exists() else {}
    _built()
    assert not {k: v for k, v in offenders.items() if v}


@pytest.mark.browser
def test_every_chart_renders_offline_in_chromium():
    """Every chart draws offline, no console errors, and no chart or table overflows its
    column without a scroll hint; a full-page screenshot of every chapter is kept under
    artifacts/screenshots/."""
    pages = _built()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        pytest.fail("Debian's chromium is not installed: run scripts/setup.sh --browser")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    problems = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
        external = []
        context.route(re.compile(r"^(?!file:).*"),
                      lambda route: (external.append(route.request.url), route.abort()))
        for html in pages:
            page = context.new_page()
            errors = []
            page.on("console", lambda msg, errors=errors: errors.append(msg.text)
                    if msg.type == "error" and msg.text not in KNOWN_THEME_NOTICES else None)
            page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
            page.goto(html.as_uri(), wait_until="load")
            if 'http-equiv="Refresh"' in html.read_text(errors="ignore"):
                # The site's root page redirects to the first chapter: evaluate the page it
                # lands on, not one the redirect is tearing down.
                page.wait_for_url(re.compile(r".*/book/index\.html$"), timeout=15000)
                page.wait_for_load_state("load")
            charts = page.locator(".vega-chart")
            for i in range(charts.count()):
                try:
                    charts.nth(i).locator("svg, canvas").first.wait_for(timeout=15000)
                except Exception:  # reported below with the page's name
                    problems.append(f"{html.name}: chart {i} drew nothing")
            problems += [f"{html.name}: {p}" for p in page.evaluate(OVERFLOW_JS)]
            if page.locator(".vega-error").count():
                problems.append(f"{html.name}: {page.locator('.vega-error').first.inner_text()}")
            page.screenshot(path=str(ARTIFACTS / f"{html.stem}.png"), full_page=True)
            problems += [f"{html.name}: console error: {e}" for e in errors]
            page.close()
        browser.close()
    problems += [f"request to the network: {u}" for u in external]
    assert not problems, "\n".join(problems)
