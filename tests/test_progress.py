"""Progress bars (svod.progress): tqdm on a terminal, silent otherwise; SVOD_PROGRESS and
--no-progress override."""

from __future__ import annotations

import io

import pytest

from svod import progress


class _TTY(io.StringIO):
    def isatty(self):
        return True


def test_quiet_unless_a_terminal(monkeypatch):
    monkeypatch.delenv("SVOD_PROGRESS", raising=False)
    assert progress.wanted(stream=io.StringIO()) is False
    assert progress.wanted(stream=_TTY()) is True
    assert progress.wanted(False, stream=_TTY()) is False
    monkeypatch.setenv("SVOD_PROGRESS", "0")
    assert progress.wanted(stream=_TTY()) is False
    monkeypatch.setenv("SVOD_PROGRESS", "1")
    assert progress.wanted(stream=io.StringIO()) is True


def test_bar_is_tqdm_when_wanted_else_silent(monkeypatch):
    tqdm = pytest.importorskip("tqdm")
    monkeypatch.setenv("SVOD_PROGRESS", "1")
    with progress.bar(3, "t") as pb:
        pb.update(3)
    assert isinstance(pb, tqdm.tqdm) and pb.n == 3
    monkeypatch.setenv("SVOD_PROGRESS", "0")
    with progress.bar(3, "t") as pb:
        pb.update(2)
    assert isinstance(pb, progress.Silent) and pb.n == 2


def test_tqdm_is_a_declared_dependency():
    import pathlib
    import tomllib

    meta = tomllib.loads((pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert any(d.startswith("tqdm") for d in meta["project"]["dependencies"])
