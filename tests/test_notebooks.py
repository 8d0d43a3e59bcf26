"""The research notebooks run: each notebook in notebooks/ is executed headless (nbclient,
the python3 kernel) at small sizes (`SVOD_NB_SMALL=1`), with matplotlib's Agg backend and
a persistent cache of its own, which it must leave untouched (notebooks work in a
temporary cache); any cell error fails the test, and the cells assert what the prose
claims. Notebooks are stored clean
(no outputs), so a diff shows only what their text changed.
"""

from __future__ import annotations

import os
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT = 180  # seconds per cell: a hung cell fails instead of hanging the run


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no notebook"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_clean(path):
    nb = nbformat.read(path, as_version=4)
    dirty = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, f"{path.name}: cells {dirty} have outputs; clear them before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    # the kernel is a subprocess: it inherits these
    monkeypatch.setenv("SVOD_NB_SMALL", "1")
    monkeypatch.setenv("SVOD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # a debugger warning on stderr
    # the kernel imports the checkout under test, whatever svod is installed in the env
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError (cell source and traceback) on any error
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", ())
              if o.get("output_type") == "error"]
    assert not errors
    # nothing reached the cache the notebook was given: it works in a temporary one
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
