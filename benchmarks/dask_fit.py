"""A model fitted on data far larger than one chunk: wengert's gradient of a loss over Dask arrays.

    python benchmarks/dask_fit.py                            # 1M, 5M and 20M rows x 8 float32
    python benchmarks/dask_fit.py --rows 2e6,2e7 --chunk-rows 250000 --model least_squares
    python benchmarks/dask_fit.py --quick                    # tiny sizes, one step (the smoke test)

The data (rows x features, float32) is generated chunk by chunk with ``dask.array.random`` and
never held whole: each gradient step recomputes it from the seed. Each step is
``wg.value_and_grad(loss)(w, X, y)`` (a lazy Dask graph) followed by one ``dask.compute`` on the
threaded scheduler, then ``w -= lr * g``. Each data size runs in its own process, so the peak
resident memory it reports (``getrusage``'s ``ru_maxrss``) is that size's alone; ``above base``
is the peak minus the process's memory before the fit (Python, NumPy, Dask, wengert imported).
The same fit with a hand-written Dask gradient (``X.T @ r / n``) runs in its own process after it,
as the reference; the two fits must end at the same weights.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402


def _peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # Linux: kilobytes


def _current_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def _data(rows, features, chunk_rows, model, seed=0):
    import dask.array as da
    state = da.random.RandomState(seed)
    x = state.standard_normal((rows, features), chunks=(chunk_rows, features)).astype(np.float32)
    w_true = np.linspace(-1.0, 1.0, features).astype(np.float32)
    noise = state.standard_normal((rows,), chunks=(chunk_rows,)).astype(np.float32)
    z = x @ w_true + 0.5 * noise
    y = (z > 0).astype(np.float32) if model == "logistic" else z
    return x, y


def _losses(wnp):
    def logistic(w, x, y):
        z = x @ w
        return wnp.mean(wnp.logaddexp(np.float32(0), z) - y * z)

    def least_squares(w, x, y):
        r = x @ w - y
        return wnp.mean(r * r)

    return {"logistic": logistic, "least_squares": least_squares}


def _hand(model, w, x, y):
    """The same value and gradient, written by hand with Dask (the reference)."""
    import dask.array as da
    z = x @ w
    n = x.shape[0]
    if model == "logistic":
        value = da.mean(da.logaddexp(np.float32(0), z) - y * z)
        r = 1 / (1 + da.exp(-z)) - y
        return value, x.T @ r / np.float32(n)
    r = z - y
    return da.mean(r * r), x.T @ (2 * r) / np.float32(n)


def child(args):
    """One data size and one contestant in this process: fit, time the steps, report the peak memory."""
    import dask
    import wengert as wg
    import wengert.numpy as wnp
    base = _current_mb()
    loss = _losses(wnp)[args.model]
    x, y = _data(args.child, args.features, args.chunk_rows, args.model)
    w = np.zeros(args.features, np.float32)
    times, values = [], []
    with dask.config.set(scheduler="threads", num_workers=args.workers):
        for step in range(args.steps):
            t0 = time.perf_counter()
            if args.who == "wengert":
                lazy = wg.value_and_grad(loss)(w, x, y)
                assert type(lazy[1]).__module__.startswith("dask"), "the gradient is not a Dask array"
            else:
                lazy = _hand(args.model, w, x, y)
            value, g = dask.compute(*lazy)
            times.append(time.perf_counter() - t0)
            values.append(float(value))
            w = w - np.float32(args.lr) * np.asarray(g)
    print(json.dumps({"step_s": statistics.median(times), "peak_mb": _peak_mb(), "base_mb": base,
                      "losses": values, "w": w.tolist()}))


def _run_child(args, rows, who):
    cmd = [sys.executable, __file__, "--child", str(rows), "--who", who] + [
        f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
        if k in ("features", "chunk_rows", "model", "steps", "lr", "workers")]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(out.stdout + out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="1e6,5e6,2e7", help="comma-separated data sizes (rows)")
    p.add_argument("--features", type=int, default=8)
    p.add_argument("--chunk-rows", type=int, default=500_000)
    p.add_argument("--model", choices=("logistic", "least_squares"), default="logistic")
    p.add_argument("--steps", type=int, default=3, help="gradient steps per size (timed: median)")
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--workers", type=int, default=2, help="threads of Dask's threaded scheduler")
    p.add_argument("--quick", action="store_true", help="tiny sizes, 2 steps (the smoke test)")
    p.add_argument("--json", default=None, help="write the rows here too")
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--who", choices=("wengert", "hand"), default="wengert", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        child(args)
        return 0
    if args.quick:
        args.rows, args.chunk_rows, args.steps = "20000,80000", 10_000, 2
    sizes = [int(float(r)) for r in args.rows.split(",")]
    print(f"{args.model} regression, {args.features} float32 features, chunks of {args.chunk_rows} rows "
          f"({args.chunk_rows * args.features * 4 / 2 ** 20:.1f} MB), {args.steps} gradient steps per size, "
          f"Dask threaded scheduler with {args.workers} threads; one process per size")
    print(f"{'rows':>12s} {'data MB':>8s} {'chunk MB':>9s} | {'step s':>7s} {'peak MB':>8s} {'above base':>10s} | "
          f"{'hand step s':>11s} {'peak MB':>8s} {'above base':>10s} | {'time ratio':>10s}  loss first -> last")
    results = []
    for rows in sizes:
        mine, hand = _run_child(args, rows, "wengert"), _run_child(args, rows, "hand")
        np.testing.assert_allclose(mine["w"], hand["w"], rtol=1e-3, atol=1e-5)   # the same fit
        r = {"rows": rows, "features": args.features, "chunk_rows": args.chunk_rows,
             "data_mb": rows * args.features * 4 / 2 ** 20, "chunk_mb": args.chunk_rows * args.features * 4 / 2 ** 20,
             "wengert": mine, "hand": hand}
        results.append(r)
        print(f"{rows:12,d} {r['data_mb']:8.0f} {r['chunk_mb']:9.1f} | {mine['step_s']:7.2f} {mine['peak_mb']:8.0f} "
              f"{mine['peak_mb'] - mine['base_mb']:10.0f} | {hand['step_s']:11.2f} {hand['peak_mb']:8.0f} "
              f"{hand['peak_mb'] - hand['base_mb']:10.0f} | {mine['step_s'] / hand['step_s']:10.2f}  "
              f"{mine['losses'][0]:.4f} -> {mine['losses'][-1]:.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
