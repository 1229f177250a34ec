"""Train a 64-32-10 MLP on scikit-learn's digits with wengert gradients.

    python examples/mlp_digits.py              # full run: ~30 epochs, then accuracy and timings
    python examples/mlp_digits.py --epochs 2   # quick smoke run

The model is ordinary NumPy code written against ``wengert.numpy``; the parameters are a dict
(a pytree), and ``wg.value_and_grad(loss)`` returns the loss and a dict of gradients shaped like
the parameters. The digits dataset ships inside scikit-learn: nothing is downloaded.
"""
import argparse
import statistics
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from threadpoolctl import threadpool_limits      # installed with scikit-learn
from tqdm import tqdm

import wengert as wg
import wengert.numpy as wnp


def init_params(rng, sizes=(64, 32, 10)):
    params = {}
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
        params[f"W{i}"] = rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)
        params[f"b{i}"] = np.zeros(n_out)
    return params


def logits(params, x):
    h = wnp.tanh(x @ params["W1"] + params["b1"])
    return h @ params["W2"] + params["b2"]


def log_softmax(z):
    z = z - wnp.max(z, axis=1, keepdims=True)          # max-subtraction: exp never overflows
    return z - wnp.log(wnp.sum(wnp.exp(z), axis=1, keepdims=True))


def loss(params, x, y_onehot):
    """Mean softmax cross-entropy."""
    return -wnp.mean(wnp.sum(y_onehot * log_softmax(logits(params, x)), axis=1))


def accuracy(params, x, labels):
    return float(np.mean(np.argmax(logits(params, x), axis=1) == labels))


def median_seconds(fns, calls):
    """Median seconds per call of each function, the calls interleaved so that all see the same
    machine (a busy neighbour slows them alike instead of skewing the ratio)."""
    for fn in fns:
        fn()                                            # warm-up
    times = [[] for _ in fns]
    for _ in range(calls):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return [statistics.median(ts) for ts in times]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timing-calls", type=int, default=50,
                        help="calls timed for the gradient/forward ratio (0 to skip)")
    parser.add_argument("--min-accuracy", type=float, default=0.0,
                        help="exit with an error if the test accuracy is below this")
    args = parser.parse_args()
    # The matrices here are tiny: one BLAS thread is fastest, and it keeps the timings below
    # from measuring BLAS threads waiting for a busy core instead of the work.
    with threadpool_limits(limits=1, user_api="blas"):
        run(args)


def run(args):

    digits = load_digits()
    x = digits.data / 16.0                              # pixels 0..16 -> 0..1
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=0.2, random_state=args.seed, stratify=digits.target)
    onehot_train = np.eye(10)[y_train]

    rng = np.random.default_rng(args.seed)
    params = init_params(rng)
    velocity = wg.tree.map(np.zeros_like, params)
    loss_and_grad = wg.value_and_grad(loss)            # gradient w.r.t. argument 0: the dict

    n = len(x_train)
    bar = tqdm(range(args.epochs), desc="training", unit="epoch")
    for _ in bar:
        order = rng.permutation(n)
        total = 0.0
        for start in range(0, n, args.batch_size):
            idx = order[start:start + args.batch_size]
            value, grads = loss_and_grad(params, x_train[idx], onehot_train[idx])
            # SGD with momentum, leaf by leaf over the pytree
            velocity = wg.tree.map(lambda v, g: args.momentum * v - args.lr * g, velocity, grads)
            params = wg.tree.map(lambda p, v: p + v, params, velocity)
            total += float(value) * len(idx)
        bar.set_postfix(loss=f"{total / n:.4f}")
    bar.close()

    train_acc = accuracy(params, x_train, y_train)
    test_acc = accuracy(params, x_test, y_test)
    print(f"train accuracy: {train_acc:.2%}   test accuracy: {test_acc:.2%}")

    if args.timing_calls > 0:
        print(f"gradient cost, median of {args.timing_calls} calls "
              "(value_and_grad(loss) vs the plain forward loss):")
        for name, xb, yb in [(f"minibatch of {args.batch_size}", x_train[:args.batch_size],
                              onehot_train[:args.batch_size]),
                             (f"whole training set ({n})", x_train, onehot_train)]:
            fwd, both = median_seconds([lambda: loss(params, xb, yb),
                                        lambda: loss_and_grad(params, xb, yb)], args.timing_calls)
            print(f"  {name:>26}: forward {fwd * 1e6:8.1f} us, value_and_grad "
                  f"{both * 1e6:8.1f} us, ratio {both / fwd:.2f}x")

    if test_acc < args.min_accuracy:
        raise SystemExit(f"test accuracy {test_acc:.2%} is below --min-accuracy {args.min_accuracy:.2%}")


if __name__ == "__main__":
    main()
