"""The README's layout section matches the tree: every module of svod/, search/ and
costmodels/ is named there, and every path it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("svod", "search", "costmodels")


def _layout() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Layout")
    block = text[start:]
    return block[block.index("```") + 3:block.index("```", block.index("```") + 3)]


def _named(layout: str) -> tuple[set[str], dict[str, set[str]]]:
    """(paths the layout names, folder -> the bare words of its entry's description).

    An entry is a line whose first column names paths (`svod/tensor.py, nn.py`: bare
    names after a path share its folder); a line indented past that column continues the
    previous entry's description, where a folder entry (`svod/codegen/`) names its modules."""
    paths: set[str] = set()
    words: dict[str, set[str]] = {}
    folder = None
    for line in layout.splitlines():
        indent = len(line) - len(line.lstrip())
        cols = re.split(r"\s{2,}", line.strip(), maxsplit=1)
        if indent >= 30:  # a continuation of the description
            words.setdefault(folder, set()).update(re.findall(r"\w+", line))
            continue
        for tok in re.findall(r"[\w./]+", cols[0]):
            if "/" in tok:
                paths.add(tok.rstrip("/"))
                folder = tok.rsplit("/", 1)[0] if tok.endswith(".py") else tok.rstrip("/")
            elif tok.endswith(".py") and folder:
                paths.add(f"{folder}/{tok}")
        if len(cols) > 1:
            words.setdefault(folder, set()).update(re.findall(r"\w+", cols[1]))
    return paths, words


def test_every_module_is_in_the_layout():
    paths, words = _named(_layout())
    missing = []
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            if f.name in ("__init__.py", "__main__.py") or "/viewer_static/" in rel:
                continue
            folder = rel.rsplit("/", 1)[0]
            if rel in paths or folder in paths and f.stem in words.get(folder, ()):
                continue
            missing.append(rel)
    assert not missing, f"README's layout does not name: {missing}"


def test_every_path_in_the_layout_exists():
    paths, _ = _named(_layout())
    gone = sorted(p for p in paths if p.split("/")[0] in PACKAGES + ("tests", "bench", "notebooks")
                  and not (ROOT / p).exists())
    assert not gone, f"README's layout names paths that are not in the tree: {gone}"
