"""Integer floor division and remainder, `(x // y) + (x % y)` over 4M pairs, for each
integer width: svod's kernel (median of svod.profile's runs) against numpy's two ufuncs
(median of 5). 8/16/32-bit divide through the float unit (vectorised), 64-bit with
scalar idiv (docs/codegen.md, IDIV / MOD).

    python3 bench/bench_int_division.py
"""

import time

import numpy as np

import svod


def main() -> None:
    n = 1 << 22
    rng = np.random.default_rng(0)
    for d in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64):
        x = rng.integers(0, 100, n).astype(d)
        y = rng.integers(1, 50, n).astype(d)
        tx, ty = svod.asarray(x), svod.asarray(y)
        prof = svod.profile((tx // ty) + (tx % ty))
        kernel_s = prof.kernels[0].seconds
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            (x // y) + (x % y)
            ts.append(time.perf_counter() - t0)
        print(f"{np.dtype(d).name:7s} svod kernel {kernel_s * 1e3:8.3f} ms   numpy {sorted(ts)[2] * 1e3:8.3f} ms")


if __name__ == "__main__":
    main()
