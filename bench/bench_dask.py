"""dask.array with numpy chunks against dask.array with svod chunks on a 2-worker
LocalCluster: a 4 GiB float32 elementwise chain plus reductions (see
svod/bench/dask_bench.py; also part of `svod bench` when dask is installed).

    python3 bench/bench_dask.py [--sizes quick|tiny] [--repeats N] [--json PATH]
"""

import sys

from svod.bench.dask_bench import main

if __name__ == "__main__":
    sys.exit(main())
