"""The viewer's two front ends: a local web page and a notebook widget.

- `serve(views)` serves the viewer on 127.0.0.1 (a free port unless one is given) from a
  daemon thread: `viewer.html`/`viewer.js`/`viewer.css` (svod/viewer_static) and
  egglog's `visualizer.js`/`visualizer.css` (installed with egglog: no network, no
  build step), plus `data.json`, the views of `svod.viewer.build`. Nothing else is read
  or served. `ViewerServer.close()` stops it.
- `Widget`: an anywidget (installed with egglog) running the same page code in Jupyter.
- `show(explanation)`: the widget inside IPython, else the page in the browser.
- `write_static(views, folder)`: the page and its data as files.

`svod viz FILE.py` (svod.cli) runs the script and serves one view per graph it realized.

>>> import svod
>>> e = svod.explain(svod.exp(svod.asarray([1.0, 2.0])))
>>> srv = serve([__import__("svod.viewer").viewer.build(e, snapshots=False)], open_browser=False)
>>> import urllib.request, json
>>> json.load(urllib.request.urlopen(srv.url + "data.json"))["graphs"][0]["kernels"][0]["ops"]
'exp'
>>> srv.close()
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import threading
import webbrowser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATIC = pathlib.Path(__file__).with_name("viewer_static")
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".json": "application/json"}


def visualizer_dir() -> pathlib.Path:
    """egglog's package folder, which holds the visualizer's built `visualizer.js`/`.css`
    (found without importing egglog)."""
    spec = importlib.util.find_spec("egglog")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the viewer needs egglog (pip install egglog): its e-graph visualizer draws the graph")
    d = pathlib.Path(next(iter(spec.submodule_search_locations)))
    if not (d / "visualizer.js").exists():
        raise RuntimeError(f"egglog at {d} has no visualizer.js (egglog >= 8 ships it)")
    return d


def files() -> dict[str, pathlib.Path]:
    """URL path -> file for everything the page loads."""
    viz = visualizer_dir()
    out = {f"/{p.name}": p for p in STATIC.iterdir() if p.suffix in _TYPES}
    out["/"] = STATIC / "viewer.html"
    out["/visualizer.js"] = viz / "visualizer.js"
    out["/visualizer.css"] = viz / "visualizer.css"
    return out


def document(views: list[dict], title: str = "svod e-graph viewer") -> dict:
    return {"title": title, "graphs": views}


class ViewerServer:
    """The viewer page on http://127.0.0.1:PORT/ from a daemon thread."""

    def __init__(self, data: dict, port: int = 0):
        payload = json.dumps(data).encode()
        table = files()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path == "/favicon.ico":
                    self.send_response(204)
                    self.end_headers()
                    return
                if path == "/data.json":
                    body, ctype = payload, _TYPES[".json"]
                elif path in table:
                    body = table[path].read_bytes()
                    ctype = _TYPES.get(table[path].suffix, "application/octet-stream")
                else:
                    self.send_error(404, "not part of the viewer")
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # quiet: the terminal belongs to the user's script
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="svod-viewer", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __repr__(self) -> str:
        return f"<svod viewer at {self.url}>"


def serve(views: list[dict], *, port: int = 0, open_browser: bool = True,
          title: str = "svod e-graph viewer") -> ViewerServer:
    """Serve `views` (from `svod.viewer.build`) and, with `open_browser`, open the page."""
    srv = ViewerServer(document(views, title), port)
    if open_browser:
        webbrowser.open(srv.url)
    return srv


def _widget_class():
    import anywidget
    import traitlets

    class Widget(anywidget.AnyWidget):
        """The viewer in a notebook (the page's code; egglog's visualizer inlined)."""

        _esm = STATIC / "viewer.js"
        _css = (visualizer_dir() / "visualizer.css").read_text() + "\n" + (STATIC / "viewer.css").read_text()
        data = traitlets.Unicode("{}").tag(sync=True)
        viz_js = traitlets.Unicode("").tag(sync=True)
        height = traitlets.Unicode("720px").tag(sync=True)

    return Widget


def widget(views: list[dict], title: str = "svod e-graph viewer", height: str = "720px"):
    """An anywidget showing `views` (display it, or leave it last in a notebook cell)."""
    cls = _widget_class()
    return cls(data=json.dumps(document(views, title)), viz_js=(visualizer_dir() / "visualizer.js").read_text(),
               height=height)


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and hasattr(ip, "kernel")


def show(explanation, *, snapshots: bool = True, open_browser: bool = True, port: int = 0):
    """`Explanation.show()`: the viewer as a notebook widget inside Jupyter, else served
    on 127.0.0.1 and opened in the browser (returns the `ViewerServer`; `.close()` it)."""
    from svod.viewer import build

    view = build(explanation, snapshots=snapshots)
    if _in_notebook():
        return widget([view])
    return serve([view], port=port, open_browser=open_browser)


def write_static(views: list[dict], folder: str, title: str = "svod e-graph viewer") -> str:
    """Write the page with its data to `folder` (serve it with any static file server;
    browsers do not load modules from file:// URLs)."""
    os.makedirs(folder, exist_ok=True)
    for name, src in files().items():
        if name != "/":
            pathlib.Path(folder, name.lstrip("/")).write_bytes(src.read_bytes())
    pathlib.Path(folder, "index.html").write_bytes((STATIC / "viewer.html").read_bytes())
    pathlib.Path(folder, "data.json").write_text(json.dumps(document(views, title)))
    return os.path.join(folder, "index.html")
