"""Every kind of HTML report, rendered by a real browser (headless Chromium driven by Playwright): the page loads
without a console error or a page error, every figure draws — each inline SVG lays out at a non-zero size with
marks in it, each image decodes — and the page asks for nothing over the network.

CI installs Debian's ``chromium`` (``.ci/run``) and the ``dev`` extra installs Playwright, which drives that
browser (no browser download); without either, the tests skip and say why."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from simulator.cli import main
from tests.helpers import SHARED_DATA

CHROMIUM = next((path for name in ("chromium", "chromium-browser", "google-chrome")
                 if (path := shutil.which(name))), None)
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install -e '.[dev]')")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed (.ci/run installs Debian's)")

# Chromium as this machine allows it: no sandbox as root, no background connections a closed network refuses
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]
# per figure: its laid-out size and how many marks (paths, lines, text, shapes) it draws
FIGURES = """() => [...document.querySelectorAll('svg')].filter(s => !s.parentElement.closest('svg')).map(s => {
    const box = s.getBoundingClientRect();
    return {width: box.width, height: box.height,
            marks: s.querySelectorAll('path, line, polyline, polygon, rect, circle, text, use').length};
})"""
IMAGES = "() => [...document.images].map(i => ({complete: i.complete, width: i.naturalWidth}))"


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


def _render(browser, report: Path) -> None:
    """Load ``report`` and check it as the module docstring says."""
    page = browser.new_page()
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: requests.append(request.url))
    page.goto(report.as_uri(), wait_until="load")
    figures, images = page.evaluate(FIGURES), page.evaluate(IMAGES)
    page.close()
    assert errors == []
    assert [url for url in requests if not url.startswith("file:") and not url.startswith("data:")] == []
    assert figures or images, "a report with no figure"
    for figure in figures:
        assert figure["width"] > 100 and figure["height"] > 100 and figure["marks"] > 10, figure
    for image in images:
        assert image["complete"] and image["width"] > 0, image


def test_a_run_report_renders(browser, tmp_path, capsys):
    report = tmp_path / "run.html"
    assert main(["run", "--set", "workload.num_requests=50", "--report", str(report)]) == 0
    capsys.readouterr()
    _render(browser, report)


def test_a_sweep_report_renders(browser, tmp_path, capsys):
    report = tmp_path / "sweep.html"
    assert main(["sweep", "experiments/sweeps/rate_by_scheduler.yaml", "--out", str(tmp_path / "s"), "--set",
                 "workload.num_requests=40", "--report", str(report)]) == 0
    capsys.readouterr()
    _render(browser, report)


def test_a_capacity_report_renders(browser, tmp_path, capsys):
    report = tmp_path / "capacity.html"
    assert main(["capacity", "experiments/quickstart.yaml", "--set", "workload.num_requests=300", "--slo",
                 "p90_ttft_ms=500", "--report", str(report)]) == 0
    capsys.readouterr()
    _render(browser, report)


def test_a_plan_report_renders(browser, tmp_path, capsys):
    out = tmp_path / "plan"
    assert main(["plan", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--max-gpus", "1", "--isl", "500", "--osl",
                 "50", "--ttft", "1000", "--tpot", "40", "--requests-per-user", "2", "--top", "1", "--modes", "agg",
                 "--quiet", "--out", str(out)]) == 0
    capsys.readouterr()
    _render(browser, out / "report.html")


@pytest.mark.skipif(not (SHARED_DATA / "silicon" / "silicon_h100.csv").is_file(), reason="../shared/data absent")
def test_a_validation_report_renders(browser, tmp_path, capsys):
    rows = (SHARED_DATA / "silicon" / "silicon_h100.csv").read_text().splitlines()
    runs = tmp_path / "runs.csv"
    runs.write_text("\n".join(rows[:6]) + "\n")
    report = tmp_path / "validate.html"
    assert main(["validate", "--runs", str(runs), "--model-configs", str(SHARED_DATA / "model_configs"),
                 "--report", str(report)]) == 0
    capsys.readouterr()
    _render(browser, report)


@pytest.mark.parametrize("body", [
    '<svg width="400" height="300"></svg>',  # a figure that draws nothing
    '<svg width="400" height="300">' + '<line x1="0" y1="0" x2="9" y2="9"/>' * 20 + '</svg><script>nope()</script>',
    '<img src="data:image/png;base64,AAAA">',  # an image that does not decode
])
def test_the_check_fails_on_a_page_that_does_not_draw(browser, tmp_path, body):
    page = tmp_path / "bad.html"
    page.write_text(f"<!doctype html><html><body>{body}</body></html>", encoding="utf-8")
    with pytest.raises(AssertionError):
        _render(browser, page)
