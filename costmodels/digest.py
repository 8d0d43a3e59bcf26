"""A human-readable digest of a machine profile (what `svod calibrate` prints).

>>> from costmodels.profile import reference
>>> summary(reference()).startswith("machine profile")
True
"""

from __future__ import annotations

from costmodels.calibrate import HOLD_BYTES
from costmodels.profile import Profile


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n /= 1024
    return f"{n:.0f} TiB"


def summary(p: Profile) -> str:
    """A human-readable digest of a profile (what `svod calibrate` prints)."""
    lines = [f"machine profile ({p.data.get('machine', {}).get('cpu', '?')}, {p.cores} cores), "
             f"calibrated in {p.data.get('calibrate_seconds', 0):.1f} s"]
    for key, label in (("read1", "read, 1 thread"), ("read2", f"read, {p.cores} threads"),
                       ("copy1", "read+write, 1 thread"), ("copy2", f"read+write, {p.cores} threads")):
        pts = p.bandwidth.get(key, [])
        if pts:
            lines.append(f"  bandwidth {label:<22} " + "  ".join(f"{_fmt_bytes(ws)}: {b / 1e9:.1f}"
                                                                  for ws, b in pts) + " GB/s")
    pk = p.data.get("peak")
    if pk:
        from svod.bench.peak import describe

        lines.append("  " + describe(pk))
    ops = p.op_seconds
    lines.append("  op cost (ns/element, 1 thread): " + ", ".join(f"{k} {v * 1e9:.2f}" for k, v in sorted(ops.items())))
    lines.append(f"  launch {p.launch_seconds * 1e6:.2f} us/kernel, dispatch {p.dispatch_seconds * 1e6:.1f} us, "
                 f"library step {p.library_step_seconds * 1e6:.1f} us, per unit {p.unit_seconds * 1e9:.1f} ns, "
                 f"compute on {p.cores} cores x{p.compute_scaling:.2f}")
    hold = p.data.get("cache_hold")
    if hold:
        lines.append(f"  cache hold ({_fmt_bytes(HOLD_BYTES)} left alone): " + "  ".join(
            f"{float(a) * 1e3:g} ms: {h:.2f}" for a, h in sorted(hold.items(), key=lambda kv: float(kv[0]))))
    mm = p.data.get("matmul_flops", {})
    if mm:
        trans = p.data.get("blas_trans_factor")
        lines.append("  matmul " + ", ".join(f"{k} {v / 1e9:.1f} GFLOP/s" for k, v in mm.items())
                     + (f"; BLAS with a transposed B x{trans:.3f}" if trans else ""))
    epi = p.data.get("epilogue_seconds")
    if epi:
        lines.append(f"  GEMM epilogue operand {epi * 1e12:.0f} ps/byte ({epi * (4 << 20) * 1e3:.2f} ms a 1024^2 "
                     "float32 matrix, all cores)")
    aging = p.data.get("matmul_age_factor")
    if aging:
        kinds = ", x".join(f"{v:.2f} ({'BLAS step' if k == 'blas' else 'GEMM'})" for k, v in aging.items())
        lines.append(f"  caches age during a product x{kinds} as fast as idle")
    return "\n".join(lines)
