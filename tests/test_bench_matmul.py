"""bench/bench_matmul.py's `--products` mode on small products: every row checks svod's
generated GEMM and the one-thread BLAS call against numpy before it times them; the
tiling and packing columns come from the same plan the kernel runs (no timing
assertions: the machine is shared)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import bench_matmul as bm  # noqa: E402

from svod.codegen.schedule import plan_gemm  # noqa: E402
from svod.dtype import float32, float64  # noqa: E402


def test_products_parse_and_refuse_bad_items():
    assert bm.parse_products("512x1024x4096, 3X4x5,") == [(512, 1024, 4096), (3, 4, 5)]
    assert len(bm.parse_products(bm.PRODUCTS)) == 6
    for bad in ("512x1024", "0x4x5", "ax4x5", "4x5x6x7"):
        with pytest.raises(SystemExit, match="is not MxKxN"):
            bm.parse_products(bad)


@pytest.mark.parametrize("m,k,n", [(512, 4096, 1024), (512, 256, 512), (37, 19, 70), (1, 8, 3)])
def test_packed_per_flop_counts_the_plans_repacking(m, k, n):
    """A packed once per column tile (read in place: only a partial last MR-row panel) and
    B once per row tile, micro-tile padding included, per 1000 flops: what the unit tiling
    of `plan_gemm` makes the kernel copy."""
    p = plan_gemm(bm.matmul_kernel(m, k, n))
    rows = (m % p.cfg.mr and p.cfg.mr) if p.a_direct else -(-m // p.cfg.mr) * p.cfg.mr
    cols = -(-n // p.cfg.nr) * p.cfg.nr
    want = 1000.0 * (p.tiles_n * rows * k + p.tiles_m * cols * k) / (2.0 * m * n * k)
    assert bm.packed_per_flop(m, k, n) == pytest.approx(want)
    assert bm.packed_per_flop(m, k, n) >= 1000.0 * k * n / (2.0 * m * n * k)  # at least B once
    if not p.a_direct:
        assert bm.packed_per_flop(m, k, n) >= 1000.0 * (m * k + k * n) / (2.0 * m * n * k)  # and A


@pytest.mark.parametrize("dt", [float32, float64])
def test_product_row_checks_and_reports(dt):
    row = bm.product_row(37, 19, 70, dt, threads=2, repeats=2)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert len(cells) == 12 and cells[0] == "37×19×70" and cells[1] == dt.name
    assert all(float(c) > 0 for c in cells[2:4] + cells[5:7])
    p = plan_gemm(bm.matmul_kernel(37, 19, 70, dt))
    assert cells[8].startswith(f"{p.units} ({p.tiles_m}×{p.tiles_n} of {p.mt}×{p.nt})")
    assert cells[9] == f"{p.nkb} × {p.kc}"


def test_products_mode_runs_as_a_script(tmp_path):
    env = dict(os.environ, SVOD_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_matmul.py"), "--products", "24x16x40",
                        "--repeats", "2", "--gap", "0"], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "## products" in p.stdout and "| 24×16×40 | float32 |" in p.stdout
