"""Small numpy programs, written against a namespace argument `np`, run unchanged with
`numpy` and with `svod.numpy` (tests/test_numpy_namespace.py compares the results).

Each returns a dict of named results. They use what numpy programs written by others
use: slices and slice assignment, broadcasting with None, positional axes and dtypes,
`out=`, ufunc methods, `np.random.default_rng` (same numbers in both), linalg.
"""

from __future__ import annotations


def heat_stencil(np):
    """Jacobi iterations of the 2-D heat equation: a 5-point stencil on slices."""
    u = np.zeros((24, 32))
    u[0, :] = 1.0
    u[:, -1] = np.linspace(0.0, 1.0, 24)
    for _ in range(20):
        u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return {"u": u, "mean": np.mean(u), "max_interior": u[1:-1, 1:-1].max()}


def polynomial(np):
    """Horner evaluation, its derivative, and a root count by sign changes."""
    coeffs = [0.5, -1.25, 0.0, 2.0, -0.75]
    x = np.linspace(-2.0, 2.0, 401)
    y = np.zeros_like(x)
    dy = np.zeros_like(x)
    for c in coeffs:
        dy = dy * x + y
        y = y * x + c
    changes = np.sum(np.diff(np.sign(y)) != 0)
    return {"y": y, "dy": dy, "roots": changes}


def cnn_layer(np):
    """conv2d (3x3, 4 filters, via shifted slices and einsum), bias, relu, 2x2 max-pool."""
    rng = np.random.default_rng(0)
    img = rng.standard_normal((2, 3, 12, 12))  # batch, channels, height, width
    w = rng.standard_normal((4, 3, 3, 3)) * 0.2
    b = np.arange(4) * 0.1
    out = np.zeros((2, 4, 10, 10))
    for i in range(3):
        for j in range(3):
            patch = img[:, :, i:i + 10, j:j + 10]
            out = out + np.einsum("bchw,oc->bohw", patch, w[:, :, i, j])
    out = np.maximum(out + b[None, :, None, None], 0)
    pooled = out.reshape(2, 4, 5, 2, 5, 2).max(axis=(3, 5))
    return {"conv": out, "pooled": pooled, "active": np.count_nonzero(out > 0)}


def histogram_entropy(np):
    """Entropy of a histogram of normal samples, and the fraction in the central bins."""
    rng = np.random.default_rng(1)
    data = rng.normal(0.5, 2.0, size=5000)
    counts, edges = np.histogram(data, bins=25)
    p = counts / counts.sum()
    entropy = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0))
    centres = (edges[:-1] + edges[1:]) / 2
    central = counts[np.abs(centres - 0.5) < 2.0].sum() / data.size
    return {"counts": counts, "edges": edges, "entropy": entropy, "central": central}


def moving_average_filter(np):
    """A low-pass filter by running sums (the FFT one: `fft_lowpass_filter`)."""
    t = np.linspace(0, 4 * np.pi, 600)
    signal = np.sin(t) + 0.3 * np.sin(25 * t)
    k = 15
    c = np.cumsum(np.concatenate([np.zeros(1), signal]))
    smooth = (c[k:] - c[:-k]) / k
    residual = signal[k // 2:k // 2 + smooth.size] - smooth
    return {"smooth": smooth, "rms": np.sqrt(np.mean(residual ** 2))}


def least_squares(np):
    """A quadratic fit: lstsq, the normal equations, and the pseudo-inverse agree."""
    rng = np.random.default_rng(2)
    x = np.linspace(-1, 1, 50)
    y = 3 * x ** 2 - 2 * x + 0.5 + 0.05 * rng.standard_normal(50)
    A = np.vstack([x ** 2, x, np.ones_like(x)]).T
    coef, res, rank, sv = np.linalg.lstsq(A, y, rcond=None)
    normal = np.linalg.solve(A.T @ A, A.T @ y)
    pinv = np.linalg.pinv(A).dot(y)
    return {"coef": coef, "res": res, "rank": rank, "sv": sv, "normal": normal, "pinv": pinv}


def logistic_regression(np):
    """Gradient descent on a logistic loss: dot, exp, mean over an axis, outer."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((200, 3))
    true_w = np.array([1.5, -2.0, 0.5])
    labels = (X @ true_w + 0.1 * rng.standard_normal(200) > 0).astype(np.float64)
    w = np.zeros(3)
    for _ in range(30):
        p = 1 / (1 + np.exp(-np.dot(X, w)))
        grad = np.mean((p - labels)[:, None] * X, axis=0)
        w -= 0.5 * grad
    loss = -np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p))
    return {"w": w, "loss": loss, "outer": np.outer(w, true_w)}


def monte_carlo(np):
    """pi by random points in the square, and a random walk's statistics."""
    rng = np.random.default_rng(4)
    pts = rng.random((20000, 2))
    inside = np.sum(np.hypot(pts[:, 0], pts[:, 1]) < 1.0)
    steps = rng.choice(np.array([-1, 1]), size=(50, 100))
    walks = np.cumsum(steps, axis=1)
    return {"pi": 4 * inside / 20000, "final_mean": walks[:, -1].mean(), "max_abs": np.abs(walks).max(),
            "std": walks.std(axis=0, ddof=1)}


def statistics(np):
    """Covariance and correlation of correlated samples; medians and quantiles."""
    rng = np.random.default_rng(5)
    z = rng.standard_normal((3, 400))
    mix = np.array([[1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [-0.3, 0.2, 0.9]])
    data = mix @ z
    return {"cov": np.cov(data), "corr": np.corrcoef(data), "cov_cols": np.cov(data.T, rowvar=False),
            "median": np.median(data, axis=1), "q": np.quantile(data[0], [0.1, 0.5, 0.9]),
            "ptp": np.ptp(data, axis=1)}


def mandelbrot(np):
    """Escape counts on a grid from mgrid, in real arithmetic."""
    y, x = np.mgrid[-1.2:1.2:40j, -2.0:0.6:60j]
    zr = np.zeros_like(x)
    zi = np.zeros_like(x)
    count = np.zeros(x.shape, dtype=np.int64)
    for _ in range(25):
        zr, zi = zr * zr - zi * zi + x, 2 * zr * zi + y
        alive = zr * zr + zi * zi <= 4.0
        count += alive
        zr = np.where(alive, zr, 2.0)
        zi = np.where(alive, zi, 0.0)
    return {"count": count, "total": count.sum()}


def ranking(np):
    """Ranks, top-k by argsort, bucketing by searchsorted, unique counts, take."""
    rng = np.random.default_rng(6)
    scores = rng.integers(0, 50, size=300)
    order = np.argsort(scores, kind="stable")
    ranks = np.empty_like(order)
    ranks[order] = np.arange(order.size)
    top = np.take(scores, order[-10:])
    buckets = np.searchsorted(np.array([10, 20, 30, 40]), scores, side="right")
    values, counts = np.unique(scores, return_counts=True)
    return {"ranks": ranks, "top": top, "buckets": np.bincount(buckets), "values": values, "counts": counts,
            "sorted": np.sort(scores)[::-1][:5]}


def linear_algebra(np):
    """Inverse, determinant, symmetric eigendecomposition, SVD, norms, matrix powers."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((5, 5))
    s = a @ a.T + 5 * np.eye(5)
    w, v = np.linalg.eigh(s)
    u, sv, vt = np.linalg.svd(a)
    return {"inv": np.linalg.inv(s), "det": np.linalg.det(s), "w": w, "recon": (v * w) @ v.T, "sv": sv,
            "svd_recon": (u * sv) @ vt, "fro": np.linalg.norm(a), "two": np.linalg.norm(a, 2),
            "pow": np.linalg.matrix_power(s / 10, 3), "chol": np.linalg.cholesky(s), "trace": np.trace(s)}


def kmeans_step(np):
    """Pairwise distances by broadcasting, nearest centres, new centres with np.add.at."""
    rng = np.random.default_rng(8)
    pts = np.concatenate([rng.normal(0, 0.5, (40, 2)), rng.normal(3, 0.5, (40, 2))])
    centres = pts[[0, 50]]
    for _ in range(3):
        d = np.sqrt(((pts[:, None, :] - centres[None, :, :]) ** 2).sum(-1))
        nearest = np.argmin(d, axis=1)
        sums = np.zeros((2, 2))
        np.add.at(sums, nearest, pts)
        centres = sums / np.bincount(nearest, minlength=2)[:, None]
    return {"centres": centres, "nearest": nearest}


def gaussian_blur(np):
    """A normalised Gaussian kernel from ogrid, applied by shifted slices of a padded image."""
    y, x = np.ogrid[-2:3, -2:3]
    g = np.exp(-(x * x + y * y) / (2 * 1.2 ** 2))
    g /= g.sum()
    img = np.arange(100, dtype=np.float64).reshape(10, 10) % 7
    padded = np.pad(img, 2)
    out = np.zeros_like(img)
    for i in range(5):
        for j in range(5):
            out += g[i, j] * padded[i:i + 10, j:j + 10]
    return {"kernel": g, "blurred": out, "hstack": np.hstack([img[:, :2], out[:, -2:]]),
            "column": np.column_stack([img[0], out[0]])}


def image_uint8(np):
    """8-bit image processing: wrapping and saturating brightness, a threshold, bit planes,
    a 3x3 box blur in uint16, a histogram by bincount, an int16 difference image."""
    rng = np.random.default_rng(3)
    img = rng.integers(0, 256, size=(20, 24), dtype=np.uint8)
    wrapped = img + np.uint8(40)  # wraps past 255, as uint8 arithmetic does
    saturated = np.clip(img.astype(np.int16) + 40, 0, 255).astype(np.uint8)
    mask = img > 128
    planes = (img[None, :, :] >> np.arange(8, dtype=np.uint8)[:, None, None]) & 1
    wide = img.astype(np.uint16)
    blur = (wide[:-2, :-2] + wide[:-2, 1:-1] + wide[:-2, 2:] + wide[1:-1, :-2] + wide[1:-1, 1:-1]
            + wide[1:-1, 2:] + wide[2:, :-2] + wide[2:, 1:-1] + wide[2:, 2:]) // 9
    diff = img[:, 1:].astype(np.int16) - img[:, :-1].astype(np.int16)
    return {"wrapped": wrapped, "saturated": saturated, "bright": np.count_nonzero(mask), "planes": planes,
            "plane_sums": planes.sum(axis=(1, 2)), "blur": blur.astype(np.uint8),
            "hist": np.bincount(img.ravel(), minlength=256),
            "diff": diff, "max_jump": np.abs(diff).max(), "total": img.sum(), "mean": img.mean(),
            "inverted": ~img, "argmax": np.argmax(img, axis=1)}


def hashing_uint32(np):
    """xorshift32 and a multiplicative hash over uint32/uint64 arrays (wrapping products,
    logical right shifts), bucketed with unsigned modulo."""
    x = np.arange(1, 257, dtype=np.uint32) * np.uint32(2654435761)
    for _ in range(3):
        x ^= x << np.uint32(13)
        x ^= x >> np.uint32(17)
        x ^= x << np.uint32(5)
    h64 = (x.astype(np.uint64) * np.uint64(11400714819323198485)) >> np.uint64(40)
    buckets = h64 % np.uint64(16)
    small = (x & np.uint32(0xFFFF)).astype(np.uint16)
    signed = x.astype(np.int32)  # two's complement reinterpretation of the high values
    return {"x": x, "h64": h64, "buckets": buckets, "counts": np.bincount(buckets.astype(np.int64), minlength=16),
            "small": small, "negatives": np.sum(signed < 0), "xmax": x.max(), "xmin": x.min(),
            "order": np.argsort(small, kind="stable")[:10], "bits": np.sum(x >> np.uint32(31))}


def fft_lowpass_filter(np):
    """The issue's FFT filter: rfft, zero the high frequencies, irfft; a complex spectrum
    and its power (complex128 throughout, as numpy)."""
    t = np.linspace(0, 1, 512, endpoint=False)
    signal = np.sin(2 * np.pi * 5 * t) + 0.5 * np.sin(2 * np.pi * 120 * t)
    spec = np.fft.rfft(signal)
    freqs = np.fft.rfftfreq(t.size, d=1 / 512)
    kept = np.where(freqs < 20, spec, 0)
    smooth = np.fft.irfft(kept, n=t.size)
    full = np.fft.fft(signal + 0.25j * np.cos(2 * np.pi * 40 * t))
    return {"smooth": smooth, "power": np.abs(kept) ** 2, "spectrum": np.abs(full),
            "phase": np.angle(full[[5, 40, 120, 472]]),
            "peak": np.argmax(np.abs(spec)), "energy": np.sum(np.real(full * np.conj(full))) / t.size}


PROGRAMS = [heat_stencil, polynomial, cnn_layer, histogram_entropy, moving_average_filter, fft_lowpass_filter,
            least_squares,
            logistic_regression, monte_carlo, statistics, mandelbrot, ranking, linear_algebra, kmeans_step,
            gaussian_blur, image_uint8, hashing_uint32]
