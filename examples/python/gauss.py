#!/usr/bin/env python3
"""Gaussian smoothing with dakit.gauss, from NumPy (and CuPy on a GPU).

Shows, in four parts:
  1. dakit.gauss on a 2-D field, and a GaussPlan made once and called in a
     loop (as an assimilation cycle does: the plan validates and precomputes
     once, each call runs the filter alone);
  2. the default method="deriche" beside method="rf" (the K-iterated first-order
     recursive filter), and how far each impulse response is from
     scipy.ndimage.gaussian_filter truncated far out (needs SciPy);
  3. nan="ignore": a field with missing values (NaN) smoothed by normalized
     convolution, where the default (nan="error") refuses it;
  4. a CuPy array smoothed in place on the GPU (zero copy: dakit filters
     CuPy's own memory), when CuPy and the cuda backend are there; otherwise
     it says why it skips that part.

Run:  python3 examples/python/gauss.py [--backend cpu] [--size 512] [--sigma 4]
Needs the dakit package (pip install . from the repository) and NumPy.
Exits 1 if a result is further from its reference than docs/gauss.md allows.
"""
import argparse
import sys
import time

import numpy as np

import dakit


def smooth_and_loop(args, rng):
    """Part 1: one call, then a plan reused in a loop."""
    field = rng.standard_normal((args.size, args.size))
    smooth = dakit.gauss(field, args.sigma, backend=args.backend)
    print("gauss: %d x %d field, sigma %g: std %.3f -> %.3f" % (args.size, args.size, args.sigma, field.std(),
                                                                 smooth.std()))

    # the plan fixes shape, dtype and parameters; out= reuses one result array
    plan = dakit.GaussPlan(field.shape, field.dtype, args.sigma, backend=args.backend)
    start = time.perf_counter()
    for _ in range(args.steps):
        field += 0.1 * rng.standard_normal(field.shape)  # the "model" moves the field
        plan(field, out=smooth)
    per_call = (time.perf_counter() - start) / args.steps
    print("GaussPlan on %s (variant %s): %d steps, %.2f ms per step (model step included)"
          % (plan.backend, plan.variant, args.steps, per_call * 1e3))
    # a plan gives what the one-off call gives, to the bit
    return np.array_equal(smooth, dakit.gauss(field, args.sigma, backend=args.backend))


def methods_against_scipy(args):
    """Part 2: impulse responses of rf and deriche against SciPy's sampled Gaussian."""
    try:
        from scipy import ndimage
    except ImportError:
        print("methods: skipped, SciPy is not installed (pip install scipy)")
        return True
    n = 8 * int(np.ceil(args.sigma)) + 1
    impulse = np.zeros((n, n))
    impulse[n // 2, n // 2] = 1.0
    # truncate=12: SciPy's kernel reaches as far as the recursive filters do
    exact = ndimage.gaussian_filter(impulse, args.sigma, mode="constant", truncate=12.0)
    peak = exact.max()
    worst = {}
    for label, kw in (("rf K=4", dict(method="rf", K=4)), ("rf K=64", dict(method="rf", K=64)),
                      ("deriche", dict(method="deriche"))):
        y = dakit.gauss(impulse, args.sigma, mode="zero", backend=args.backend, **kw)
        worst[label] = np.abs(y - exact).max() / peak
        print("methods: %-8s max |dakit - scipy| = %.1e of the peak" % (label, worst[label]))
    # rf has the Gaussian's variance but not its shape (excess kurtosis about
    # 3/K), so it approaches SciPy as K grows; deriche fits the shape itself
    # docs/gauss.md: deriche within 1e-3 of the peak for sigma 2 to 100
    return worst["deriche"] <= 1e-3 or args.sigma < 2


def missing_values(args, rng):
    """Part 3: a noisy field with gaps, smoothed around them."""
    noisy = dakit.gauss(rng.standard_normal((args.size, args.size)), 8.0, backend=args.backend)
    noisy = noisy / noisy.std() + 0.3 * rng.standard_normal(noisy.shape)
    complete = dakit.gauss(noisy, args.sigma, backend=args.backend)  # what smoothing gives without gaps
    gappy = noisy.copy()
    gappy[rng.random(gappy.shape) < 0.2] = np.nan        # 20 % of the values lost here and there
    band = slice(args.size // 3, args.size // 3 + int(2 * args.sigma))
    gappy[:, band] = np.nan                               # and a band 2 sigma wide missing altogether
    try:
        dakit.gauss(gappy, args.sigma, backend=args.backend)
    except dakit.InvalidArgumentError as e:               # nan="error", the default, says where
        print("nan='error': %s" % e)
    # normalized convolution: points with no valid value within the filter's
    # reach would stay NaN (docs/gauss.md); a band 2 sigma wide has none
    filled = dakit.gauss(gappy, args.sigma, backend=args.backend, nan="ignore")
    zeroed = dakit.gauss(np.nan_to_num(gappy), args.sigma, backend=args.backend)
    rms = lambda a: float(np.sqrt(np.mean((a - complete) ** 2)))
    print("nan='ignore': %.1f %% missing, NaN left %d; rms distance to the gap-free result %.3f "
          "(NaN set to 0 instead: %.3f)" % (100 * np.isnan(gappy).mean(), np.isnan(filled).sum(), rms(filled),
                                           rms(zeroed)))
    return np.isfinite(filled).all() and rms(filled) < rms(zeroed)


def cuda_reason(args):
    """Why part 4 cannot run here, or None when it can."""
    if args.backend not in (None, "cuda"):
        return "--backend %s was asked for" % args.backend
    try:
        import cupy  # noqa: F401
    except ImportError:
        return "CuPy is not installed"
    for b in dakit.info().backends:
        if b.name == "cuda":
            return None if b.usable else "the cuda backend is refused: %s" % b.reason
    return "no cuda plugin was found (dakit was built without nvcc)"


def cupy_in_place(args, rng):
    """Part 4: a CuPy array filtered in place on the GPU."""
    reason = cuda_reason(args)
    if reason:
        print("cupy: skipped, %s" % reason)
        return True
    import cupy as cp
    host = rng.standard_normal((args.size, args.size)).astype(np.float32)
    x = cp.asarray(host)                  # on the GPU
    address = x.data.ptr
    plan = dakit.GaussPlan(x.shape, np.float32, args.sigma, backend="cuda")
    y = plan(x, out=x)                    # dakit wraps CuPy's pointer: no copy, no host round trip
    same = y is x and x.data.ptr == address
    diff = float(np.abs(cp.asnumpy(x) - dakit.gauss(host, args.sigma, backend="cpu")).max())
    start = time.perf_counter()
    for _ in range(args.steps):
        plan(x, out=x)                    # queued on CuPy's stream, as CuPy's own kernels are
    cp.cuda.get_current_stream().synchronize()
    per_call = (time.perf_counter() - start) / args.steps
    print("cupy: in place on %s: same array %s, max |gpu - cpu| = %.1e, %.1f us per call"
          % (plan.context.device, same, diff, per_call * 1e6))
    return same and diff <= 1e-5


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default=None,
                        help="dakit backend: cpu, opencl, cuda or a comma list in order of preference "
                             "(default: dakit's automatic choice, which DAKIT_BACKEND can set)")
    parser.add_argument("--size", type=int, default=512, help="the field is SIZE x SIZE values (default 512)")
    parser.add_argument("--sigma", type=float, default=4.0, help="the Gaussian's sigma in grid units (default 4)")
    parser.add_argument("--steps", type=int, default=20, help="calls of the plan in the loops (default 20)")
    args = parser.parse_args()
    rng = np.random.default_rng(14)

    ok = {"loop": smooth_and_loop(args, rng), "methods": methods_against_scipy(args),
          "nan": missing_values(args, rng), "cupy": cupy_in_place(args, rng)}
    failed = [k for k, v in ok.items() if not v]
    print("gauss example: %s" % ("all parts agree with their references" if not failed
                                 else "FAILED: " + ", ".join(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
