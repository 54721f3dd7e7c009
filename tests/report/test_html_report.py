"""The HTML reports (``llmsim report``, ``--report``): parsed back, their numbers are the summary's to four
significant digits, every figure is inline, nothing is fetched from elsewhere, and the same result gives the same
bytes whether the report is built from memory or from the files."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser

import pandas as pd
import pytest

from simulator.cli import main
from tests.helpers import REPO, SHARED_DATA


class Parsed(HTMLParser):
    """Headings, table cells (per table, per row) and tag counts of a page; any attribute naming a URL."""

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[str] = []
        self.tables: list[list[list[str]]] = []
        self.tags: dict[str, int] = {}
        self.urls: list[str] = []
        self._text: list[str] | None = None
        self._heading = False

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.urls += [value for name, value in attrs if name in ("src", "href") and value and "://" in value]
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th", "h2"):
            self._text, self._heading = [], tag == "h2"

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._text is not None:
            self.tables[-1][-1].append("".join(self._text).strip())
            self._text = None
        elif tag == "h2" and self._text is not None:
            self.headings.append("".join(self._text).strip())
            self._text = None

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)


def parse(text: str) -> Parsed:
    parsed = Parsed()
    parsed.feed(text)
    return parsed


def value_of(cell: str) -> float:
    """A cell's number without its unit and separators ('1,597 tok/s' → 1597; '4.75%' → 0.0475)."""
    head = cell.split()[0].replace(",", "")
    return float(head[:-1]) / 100 if head.endswith("%") else float(head)


def test_a_runs_report_states_the_summary_with_its_figures_inline(tmp_path, capsys):
    out, report = tmp_path / "out", tmp_path / "run.html"
    args = ["run", "--set", "workload.num_requests=300", "--out", str(out), "--timeline", "--report", str(report)]
    assert main(args) == 0
    capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    page = parse(report.read_text())
    assert page.headings[:5] == ["Setup", "Memory plan (one GPU)", "Latency", "Iteration bounds (one GPU)",
                                 "Every figure of the summary"]
    setup = {row[0]: row[1] for row in page.tables[0][1:]}  # the workload and SLO it was held to, stated
    assert setup["workload"] == ("poisson arrivals at 8 req/s, 300 requests, prompts lognormal mean 1,000, outputs "
                                 "200 tokens")
    assert setup["slo (per request)"] == "ttft_ms <= 500, tpot_ms <= 50"
    assert {"Plots", "Resolved config"} <= set(page.headings)
    # latency CDFs, timeline, phase shares, roofline
    assert page.tags.get("svg") == 4 and "script" not in page.tags and "img" not in page.tags and not page.urls
    latency = {row[0]: row[1:] for row in page.tables[2][1:]}
    header = page.tables[2][0][1:]
    for label, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("E2E latency", "e2el")):
        for stat, cell in zip(header, latency[label], strict=True):
            assert value_of(cell) == pytest.approx(summary[f"{stat}_{key}_ms"], rel=5e-4), (label, stat)
    bounds = {row[0]: dict(zip(page.tables[3][0][1:], row[1:], strict=True)) for row in page.tables[3][1:]}
    assert set(bounds) == {"decode", "prefill", "mixed", "all"} - {p for p in ("prefill", "mixed")
                                                                    if not summary[f"iter_{p}_busy_s"]}
    for phase, row in bounds.items():  # llmsim run records them: its summary's figures, four digits
        assert value_of(row["memory-bound"]) == pytest.approx(summary[f"iter_{phase}_memory_bound_frac"], abs=5e-4)
        assert value_of(row["of peak HBM"]) == pytest.approx(summary[f"iter_{phase}_peak_hbm_frac"], rel=5e-4)
        assert row["busy"].endswith(" s")
    rest = {row[0]: row[1] for row in page.tables[4][1:]}
    assert value_of(rest["output_throughput"]) == pytest.approx(summary["output_throughput"], rel=5e-4)
    assert rest["output_throughput"].endswith("tok/s") and rest["duration_s"].endswith(" s")
    assert value_of(rest["mean_kv_usage"]) == pytest.approx(summary["mean_kv_usage"], rel=5e-4)
    # the same report from the folder: byte for byte
    assert main(["report", str(out)]) == 0
    assert (out / "report.html").read_bytes() == report.read_bytes()


def test_a_sweeps_report_has_a_row_per_point(tmp_path, capsys):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"base: {REPO / 'experiments' / 'quickstart.yaml'}\n"
                     "grid: {workload.arrival.rate: [4, 8]}\nzip: {workload.num_requests: [100]}\n")
    out = tmp_path / "out"
    assert main(["sweep", str(sweep), "--out", str(out), "--no-progress", "--report", str(tmp_path / "s.html")]) == 0
    capsys.readouterr()
    page = parse((tmp_path / "s.html").read_text())
    points = page.tables[0]
    assert len(points) == 1 + 2 and page.tags.get("svg") == 1 and not page.urls
    rates = [value_of(row[points[0].index("workload.arrival.rate")]) for row in points[1:]]
    assert rates == [4, 8]
    # what a planner reads leads: the swept values, then throughput and tail latency, not 80 alphabetical columns
    assert points[0][:5] == ["point", "workload.arrival.rate", "workload.num_requests", "seed", "completed"]
    assert {"output_throughput", "p99_ttft_ms", "p99_tpot_ms"} <= set(points[0]) and len(points[0]) <= 20
    index = pd.read_parquet(out / "index.parquet")
    folded = page.tables[1][0]
    assert set(points[0]) | set(folded) == set(index.columns) - {"error"} and folded[0] == "point"


def test_a_capacity_report_keeps_the_search(tmp_path, capsys):
    report = tmp_path / "c.html"
    args = ["capacity", str(REPO / "experiments" / "quickstart.yaml"), "--slo", "p99_ttft_ms=300", "--tolerance",
            "0.2", "--set", "workload.num_requests=300", "--set", "slo={}", "--report", str(report)]
    assert main(args) == 0
    out = capsys.readouterr().out
    text = html.unescape(report.read_text())
    capacity_line = next(line for line in out.splitlines() if line.startswith("capacity:"))
    assert capacity_line in text and "meets the SLO" in text and parse(text).tags.get("svg") == 1


@pytest.mark.skipif(not (SHARED_DATA / "silicon" / "silicon_h100.csv").is_file(), reason="../shared/data absent")
def test_a_validation_report_has_the_text_and_the_plot(tmp_path, capsys):
    rows = (SHARED_DATA / "silicon" / "silicon_h100.csv").read_text().splitlines()
    runs = tmp_path / "runs.csv"
    runs.write_text("\n".join(rows[:6]) + "\n")
    report = tmp_path / "v.html"
    assert main(["validate", "--runs", str(runs), "--model-configs", str(SHARED_DATA / "model_configs"),
                 "--report", str(report)]) == 0
    out = capsys.readouterr().out
    text = html.unescape(report.read_text())
    assert out.splitlines()[0] in text and parse(text).tags.get("svg") == 1


def test_reporting_a_folder_without_results_is_a_one_line_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "nothing to report" in err and len(err.strip().splitlines()) == 1
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "not a folder" in capsys.readouterr().err


@pytest.mark.parametrize(("summary", "config", "problem"), [
    (b"[1, 2]", None, r"summary\.json: a run's summary is a JSON object, got list"),
    (b"{}", b"\xff\xfe not text", r"config\.yaml: not UTF-8 text"),
    (b"\xff{}", None, r"summary\.json: not UTF-8 text"),
])
def test_a_run_folder_that_is_not_a_runs_output_is_one_line(tmp_path, capsys, summary, config, problem):
    (tmp_path / "summary.json").write_bytes(summary)
    if config is not None:
        (tmp_path / "config.yaml").write_bytes(config)
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(problem, err)
