"""The interactive viewer (svod.viewer, svod.viewer_serve, `svod viz`): its data, the local
server, the notebook widget, and the page in a real headless Chromium (Debian's
`chromium`, driven by Playwright; .ci/run installs both): the e-graphs of a softmax and
of an MLP block render, a click on an e-class lists its alternatives, the chosen plan is
outlined. `SVOD_SCREENSHOTS=DIR` keeps the screenshots (docs/images has them)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import svod
from svod import viewer, viewer_serve, workloads

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _softmax():
    from svod import sources

    with sources.record():
        x = svod.random.randn(8, 16)
        y = svod.nn.softmax(x * 2.0)
    return svod.explain(y)


def _mlp():
    w = workloads.get("w4_mlp")
    return svod.explain(w.build(**w.tensors(w.make_inputs(w.small_shapes))))


def test_view_of_a_softmax():
    v = viewer.build(_softmax(), title="softmax")
    assert len(v["snapshots"]) >= 2  # after encoding, then each saturation iteration
    first, last = (json.loads(s) for s in (v["snapshots"][0], v["snapshots"][-1]))
    assert len(last["nodes"]) > len(first["nodes"])  # the rules added the fused variants
    assert all(n["eclass"] in last["class_data"] for n in last["nodes"].values())
    (k,) = v["kernels"]
    assert k["ops"] == "mul·max·sub·exp·sum·div" and k["us"] > 0
    out = str(v["kernels"][0]["nodes"][-1])
    assert v["chosen_classes"] == [f"T{out}"]
    # the division's class: four alternatives (each operand loaded or fused), labels differ
    div = v["classes"][f"F{out}"]
    labels = [a["label"] for a in div["alternatives"]]
    assert len(labels) == len(set(labels)) == 4 and all(lab.startswith("div(") for lab in labels)
    chosen = [a for a in div["alternatives"] if 0 in a["variants"]]
    assert len(chosen) == 1 and chosen[0]["kernels"][0]["kernel"] == k["name"]
    assert chosen[0]["enode"] in v["chosen_enodes"]
    assert any("test_viewer.py:" in (n["source"] or "") for n in v["nodes"].values())
    assert v["variants"][0]["difference"] == "the chosen plan" and v["variants"][1]["difference"]


def test_server_serves_the_viewer_and_nothing_else():
    srv = viewer_serve.serve([viewer.build(_softmax(), snapshots=False)], open_browser=False)
    try:
        assert srv.url.startswith("http://127.0.0.1:")
        doc = json.load(urllib.request.urlopen(srv.url + "data.json"))
        assert doc["graphs"][0]["kernels"][0]["ops"] == "mul·max·sub·exp·sum·div"
        for path in ("", "viewer.js", "viewer.css", "visualizer.js", "visualizer.css"):
            assert urllib.request.urlopen(srv.url + path).status == 200
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(srv.url + "../../etc/passwd")
    finally:
        srv.close()


def test_notebook_widget_and_show_outside_a_notebook():
    pytest.importorskip("anywidget")
    e = _softmax()
    w = viewer_serve.widget([viewer.build(e, snapshots=False)])
    assert json.loads(w.data)["graphs"][0]["kernels"] and "export" in w.viz_js
    srv = e.show(open_browser=False, snapshots=False)  # not in IPython: served on 127.0.0.1
    try:
        assert json.load(urllib.request.urlopen(srv.url + "data.json"))["graphs"]
    finally:
        srv.close()


def test_svod_viz_writes_the_page_with_source_lines(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text("import sys\nimport svod\nn = int(sys.argv[1])\nx = svod.random.randn(n, 16)\n"
                    "y = svod.nn.softmax(x * 2.0)\nprint(y.numpy().shape)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), SVOD_CACHE_DIR=str(tmp_path / "c"))
    out = tmp_path / "page"
    r = subprocess.run([sys.executable, "-m", "svod", "viz", str(prog), "--write", str(out), "--", "12"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "(12, 16)" in r.stdout and "viewer written to" in r.stdout
    doc = json.loads((out / "data.json").read_text())
    (g,) = doc["graphs"]
    assert any((n["source"] or "").startswith("prog.py:5") for n in g["nodes"].values())
    assert (out / "index.html").exists() and (out / "visualizer.js").exists()


def _browser():
    if not CHROMIUM:
        if os.environ.get("CI"):
            pytest.fail("CI must provide Debian's chromium (.ci/run installs it)")
        pytest.skip("chromium not installed (apt-get install chromium)")
    if os.environ.get("CI"):
        import playwright  # noqa: F401 - CI must have it
    return pytest.importorskip("playwright.sync_api")


def test_browser_renders_clicks_and_highlights(tmp_path):
    pw = _browser()
    shots = Path(os.environ.get("SVOD_SCREENSHOTS") or tmp_path)
    views = [viewer.build(_softmax(), title="softmax"), viewer.build(_mlp(), title="MLP block (W4, small)")]
    srv = viewer_serve.serve(views, open_browser=False)
    errors: list[str] = []
    try:
        with pw.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(srv.url)
            page.wait_for_selector('[data-ready="1"]', timeout=60_000)
            for gi, v in enumerate(views):
                page.select_option("#svod-graph", str(gi))
                out = v["chosen_classes"][-1]
                page.wait_for_selector(f'.react-flow__node[data-id="class-{out}"]', timeout=120_000)
                page.wait_for_timeout(800)  # the fit-to-view animation
                # the e-graph rendered: every e-class of the last snapshot is a node
                last = json.loads(v["snapshots"][-1])
                assert page.locator('.react-flow__node[data-id^="class-"]').count() == len(last["class_data"])
                # the saturation slider steps through the snapshots
                assert page.locator('[aria-label="Select which egraph to display from the history"]').count() == 1
                assert f"{len(v['snapshots'])} snapshot(s)" in page.inner_text("#svod-status")
                # the chosen plan is outlined red
                shadow = page.evaluate("(id) => getComputedStyle(document.querySelector("
                                       "`.react-flow__node[data-id=\"class-${id}\"] > div`)).boxShadow", out)
                assert "rgb(214, 39, 40)" in shadow
                # a click on an e-class (its border) lists its alternatives with kernels and prices
                # (one some variant uses: a rule's prebuilt template term may make a class no
                # program reaches, listed with its alternatives but no kernels)
                fclass = next(c for c, d in v["classes"].items() if c.startswith("F") and len(d["alternatives"]) > 1
                              and any(a["variants"] for a in d["alternatives"]))
                page.click(f'.react-flow__node[data-id="class-{fclass}"]', position={"x": 1, "y": 1})
                page.wait_for_selector(f'#svod-class[data-class="{fclass}"]', timeout=10_000)
                alts = page.locator("#svod-class li.svod-alt")
                assert alts.count() == len(v["classes"][fclass]["alternatives"])
                text = page.inner_text("#svod-class")
                assert "used by variant(s) #0" in text and "µs" in text and "kernel" in text
                assert page.locator("#svod-class li.svod-alt.svod-chosen").count() == 1
                assert fclass in page.get_attribute(".svod-viewer", "data-selected")
                page.screenshot(path=str(shots / f"viewer_{'softmax' if gi == 0 else 'mlp'}.png"))
                # a kernel lists its ops; focus shows its region, "show all" the whole again
                page.click("li.svod-kernel .svod-row >> nth=0")
                assert page.locator("li.svod-kernel ul.svod-ops li").first.is_visible()
                page.click("li.svod-kernel .svod-focus >> nth=0")
                page.wait_for_selector("#svod-show-all:not([hidden])", timeout=10_000)
                page.click("#svod-show-all")
            browser.close()
    finally:
        srv.close()
    assert not errors, errors
