"""The benchmark workloads W1-W4 of docs/design (seeds 000, 001, 002), as a user writes them, and
W5, a recurrence (each step waits on the one before: a loop no pass can turn into array code).

Each workload has three parts:

* ``*_code(np, Buffer)``: the user's code, written against a NumPy namespace ``np`` (in the
  benchmark that is ``wengert.numpy``, ``autograd.numpy``, ``jax.numpy``, or a thin alias module for
  torch and mygrad; see ``peers.py``). It returns a dict ``formulation -> loss function``. The same
  source therefore runs under every library, and on plain ndarrays it is plain NumPy.
  ``Buffer`` is the writable-array type for the seed-000 loop (``wg.Buffer`` for wengert).
* ``*_hand(...)``: a hand-written NumPy value-and-gradient of the same math, the reference every
  library's gradient is checked against and the speed to match.
* ``rows(quick)``: the benchmark rows: a name, the inputs, which arguments are differentiated.

Everything is float32. Losses are weighted sums with fixed random weights, because the plain sum of
a softmax is a constant whose gradient is zero.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy

F32 = numpy.float32


def softmax_code(np):
    def softmax(x, axis):
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / np.sum(e, axis=axis, keepdims=True)
    return softmax


# ================================================================================================
# W1: pairwise cosine similarity, softmax over the first index (seed 000)
#   a: (W, R, B), b: (W, N, B); S[i, j, k] = cos(b[:, i, k], a[:, j, k]); P = softmax over i
# ================================================================================================
def w1_code(np, Buffer=None):
    softmax = softmax_code(np)

    # -- the seed's own code: a per-(k, j, i) loop writing into a Buffer, then per-batch softmax --
    def mynorm(x):
        return np.sqrt(np.sum(x ** 2))

    def cosinesim(u, v):
        return np.dot(u, v) / (mynorm(u) * mynorm(v))

    def _pairwise(r, a, b, K):
        W, na, batchsize = a.shape
        nb = b.shape[1]
        for k in range(batchsize):
            for j in range(na):
                aj = a[:, j, k]
                for i in range(nb):
                    bi = b[:, i, k]
                    r[i, j, k] = K(bi, aj)
        return r

    def pairwise_loop(a, b, K=cosinesim):
        W, R, batchsize = a.shape
        N = b.shape[1]
        out = Buffer.zeros((N, R, batchsize), a.dtype)
        _pairwise(out, a, b, K)
        for k in range(batchsize):
            out[:, :, k] = softmax(out[:, :, k], axis=0)
        return out.freeze()

    # -- the same loop for a library without mutation (autograd): build lists, then np.array ----
    def pairwise_lists(a, b, K=cosinesim):
        W, R, batchsize = a.shape
        N = b.shape[1]
        per_batch = []
        for k in range(batchsize):
            rk = np.array([[K(b[:, i, k], a[:, j, k]) for j in range(R)] for i in range(N)])
            per_batch.append(softmax(rk, axis=0))
        return np.stack(per_batch, axis=2)

    # -- vectorized: whole arrays, one einsum ---------------------------------------------------
    def pairwise_vectorized(a, b):
        dots = np.einsum("wik,wjk->ijk", b, a)
        na = np.sqrt(np.sum(a ** 2, axis=0))            # (R, B)
        nb = np.sqrt(np.sum(b ** 2, axis=0))            # (N, B)
        S = dots / (nb[:, None, :] * na[None, :, :])
        return softmax(S, axis=0)

    def vectorized(a, b, wts):
        return np.sum(pairwise_vectorized(a, b) * wts)

    def loop(a, b, wts):
        pw = pairwise_loop if Buffer is not None else pairwise_lists
        return np.sum(pw(a, b) * wts)

    return {"vectorized": vectorized, "loop": loop}


# -- every spelling of the seed loops: where the results go, and how each dot product is written --
# A cliff in one spelling is a cliff: users write all of these.
DOT_SPELLINGS = ("@", "np.dot", "np.sum(u*v)", "np.inner")
CONTAINERS = ("Buffer", "in-place", "lists+stack")
# more spellings of seed 000's kernel, for wengert alone (benchmarks/vectorize.py --more-spellings):
# other ways to write the dot product, and other ways to write the norm (the seed's own is the first)
MORE_DOT_SPELLINGS = ("np.vdot", "np.einsum", "np.tensordot", "u.dot(v)", "np.matmul", "u.T @ v")
NORM_SPELLINGS = ("np.sqrt(np.sum(u**2))", "np.linalg.norm(u)", "np.sqrt(np.dot(u, u))", "np.sqrt(np.sum(u*u))",
                  "np.sqrt(np.sum(np.abs(u)**2))", "np.sqrt(np.sum(np.square(u)))")


def dot_spelling(np, spelling):
    return {"@": lambda u, v: u @ v, "np.dot": lambda u, v: np.dot(u, v),
            "np.sum(u*v)": lambda u, v: np.sum(u * v), "np.inner": lambda u, v: np.inner(u, v),
            "np.vdot": lambda u, v: np.vdot(u, v), "np.einsum": lambda u, v: np.einsum("i,i->", u, v),
            "np.tensordot": lambda u, v: np.tensordot(u, v, 1), "u.dot(v)": lambda u, v: u.dot(v),
            "np.matmul": lambda u, v: np.matmul(u, v), "u.T @ v": lambda u, v: u.T @ v}[spelling]


def norm_spelling(np, spelling):
    return {"np.sqrt(np.sum(u**2))": lambda u: np.sqrt(np.sum(u ** 2)),
            "np.linalg.norm(u)": lambda u: np.linalg.norm(u),
            "np.sqrt(np.dot(u, u))": lambda u: np.sqrt(np.dot(u, u)),
            "np.sqrt(np.sum(u*u))": lambda u: np.sqrt(np.sum(u * u)),
            "np.sqrt(np.sum(np.abs(u)**2))": lambda u: np.sqrt(np.sum(np.abs(u) ** 2)),
            "np.sqrt(np.sum(np.square(u)))": lambda u: np.sqrt(np.sum(np.square(u)))}[spelling]


def traced_zeros(np, shape, like):
    """Zeros that live where ``like`` lives (a traced array when ``like`` is one), so that the
    loop's ``out[i, j] = v`` writes are differentiated (a write into a plain array is not)."""
    return np.zeros(shape, like.dtype) + 0 * like.ravel()[0]


def spelling_name(container, dot, norm=NORM_SPELLINGS[0]):
    return f"loop[{container}, {dot}]" if norm == NORM_SPELLINGS[0] else f"loop[{container}, {dot}, {norm}]"


def w1_spellings_code(np, Buffer=None):
    """Seed 000's loop in every spelling: results written into a Buffer, written in place into a
    traced zeros array, or built as nested lists and stacked; each dot product as ``@``,
    ``np.dot``, ``np.sum(u * v)`` or ``np.inner``."""
    softmax = softmax_code(np)

    def make(container, dot, norm=norm_spelling(np, NORM_SPELLINGS[0])):
        def cosinesim(u, v):
            return dot(u, v) / (norm(u) * norm(v))

        def loss(a, b, wts):
            W, R, B = a.shape
            N = b.shape[1]
            if container == "lists+stack":
                P = np.stack([softmax(np.stack([np.stack([cosinesim(b[:, i, k], a[:, j, k]) for j in range(R)])
                                                for i in range(N)]), axis=0) for k in range(B)], axis=2)
                return np.sum(P * wts)
            out = Buffer.zeros((N, R, B), a.dtype) if container == "Buffer" else traced_zeros(np, (N, R, B), a)
            for k in range(B):
                for j in range(R):
                    aj = a[:, j, k]
                    for i in range(N):
                        out[i, j, k] = cosinesim(b[:, i, k], aj)
            if container == "Buffer":            # the seed's own ending
                for k in range(B):
                    out[:, :, k] = softmax(out[:, :, k], axis=0)
                P = out.freeze()
            else:
                P = np.stack([softmax(out[:, :, k], axis=0) for k in range(B)], axis=2)
            return np.sum(P * wts)
        return loss

    spellings = {spelling_name(c, d): make(c, dot_spelling(np, d)) for c in CONTAINERS for d in DOT_SPELLINGS}
    spellings.update({spelling_name("Buffer", d): make("Buffer", dot_spelling(np, d)) for d in MORE_DOT_SPELLINGS})
    spellings.update({spelling_name("Buffer", "np.dot", n): make("Buffer", dot_spelling(np, "np.dot"),
                                                                 norm_spelling(np, n)) for n in NORM_SPELLINGS[1:]})
    return spellings

# more ways to write seed 000's loop itself (benchmarks/vectorize.py --more-loops): where the
# columns are read, what the results are collected in, the loop order, how the work is split
W1_LOOP_FORMS = ("inline reads", "normalized first", "lists+np.array", "x.at[].set", "loop order i,j,k",
                 "matrix-vector per (j,k)", "columns of a[..., k]", "np.split, enumerate", "np.moveaxis, iterate",
                 "rows of a.T", "columns kept 2-D", "np.take, then the column", "list index, raveled",
                 "normalized in the kernel")


def w1_loop_forms_code(np, Buffer=None, at=None):
    """Seed 000's loop written further ways (``at``: the library's functional update of any array,
    ``wg.at`` for wengert)."""
    softmax = softmax_code(np)

    def cos(u, v):
        return np.dot(u, v) / (np.sqrt(np.sum(u ** 2)) * np.sqrt(np.sum(v ** 2)))

    def inline_reads(a, b, wts):      # every column read where it is used: twice per trip
        W, R, B = a.shape
        N = b.shape[1]
        out = Buffer.zeros((N, R, B), a.dtype)
        for k in range(B):
            for j in range(R):
                for i in range(N):
                    out[i, j, k] = np.dot(b[:, i, k], a[:, j, k]) / (np.linalg.norm(b[:, i, k])
                                                                      * np.linalg.norm(a[:, j, k]))
        return np.sum(softmax(out.freeze(), axis=0) * wts)

    def normalized_first(a, b, wts):  # unit columns first, then their dot products
        W, R, B = a.shape
        N = b.shape[1]
        out = Buffer.zeros((N, R, B), a.dtype)
        for k in range(B):
            units = [a[:, j, k] / np.linalg.norm(a[:, j, k]) for j in range(R)]
            for i in range(N):
                u = b[:, i, k] / np.linalg.norm(b[:, i, k])
                for j in range(R):
                    out[i, j, k] = np.dot(u, units[j])
        return np.sum(softmax(out.freeze(), axis=0) * wts)

    def lists_array(a, b, wts):       # nested lists made an array, softmax over the whole array
        W, R, B = a.shape
        N = b.shape[1]
        S = np.array([[[cos(b[:, i, k], a[:, j, k]) for k in range(B)] for j in range(R)] for i in range(N)])
        return np.sum(softmax(S, axis=0) * wts)

    def at_set(a, b, wts):            # functional updates, one per element (JAX's idiom)
        W, R, B = a.shape
        N = b.shape[1]
        S = np.zeros((N, R, B), a.dtype)
        for i in range(N):
            for j in range(R):
                for k in range(B):
                    S = at(S)[i, j, k].set(cos(b[:, i, k], a[:, j, k]))
        return np.sum(softmax(S, axis=0) * wts)

    def loop_order_ijk(a, b, wts):    # the batch innermost
        W, R, B = a.shape
        N = b.shape[1]
        out = Buffer.zeros((N, R, B), a.dtype)
        for i in range(N):
            for j in range(R):
                for k in range(B):
                    out[i, j, k] = cos(b[:, i, k], a[:, j, k])
        return np.sum(softmax(out.freeze(), axis=0) * wts)

    def matrix_vector(a, b, wts):     # one matrix-vector product per (j, k), stacked
        W, R, B = a.shape
        cols = []
        for k in range(B):
            bk = b[:, :, k]
            nb = np.sqrt(np.sum(bk ** 2, axis=0))
            cols.append(np.stack([(bk.T @ a[:, j, k]) / (nb * np.linalg.norm(a[:, j, k])) for j in range(R)],
                                 axis=1))
        return np.sum(softmax(np.stack(cols, axis=2), axis=0) * wts)

    def per_batch(a, b, wts):         # each batch's matrices first (a[..., k]), then their columns
        W, R, B = a.shape
        N = b.shape[1]
        out = Buffer.zeros((N, R, B), a.dtype)
        for k in range(B):
            ak, bk = a[..., k], b[..., k]
            for j in range(R):
                for i in range(N):
                    out[i, j, k] = cos(bk[:, i], ak[:, j])
        return np.sum(softmax(out.freeze(), axis=0) * wts)

    def split_enumerate(a, b, wts):   # np.split into batches, enumerate their zip, columns listed first
        W, R, B = a.shape
        N = b.shape[1]
        out = Buffer.zeros((N, R, B), a.dtype)
        for k, (ak, bk) in enumerate(zip(np.split(a, B, axis=2), np.split(b, B, axis=2))):
            acols = [ak[:, j, 0] for j in range(R)]
            for i in range(N):
                bi = bk[:, i, 0]
                for j, aj in enumerate(acols):
                    out[i, j, k] = cos(bi, aj)
        return np.sum(softmax(out.freeze(), axis=0) * wts)

    def moveaxis_iterate(a, b, wts):  # the batch axis moved first and iterated, lists + stack
        R, N = a.shape[1], b.shape[1]
        per = []
        for ak, bk in zip(np.moveaxis(a, -1, 0), np.moveaxis(b, -1, 0)):
            S = np.stack([np.stack([cos(bk[:, i], ak[:, j]) for j in range(R)]) for i in range(N)])
            per.append(softmax(S, axis=0))
        return np.sum(np.stack(per, axis=2) * wts)

    def rows_of_transpose(a, b, wts):  # columns as rows of the transposes: a.T[k][j] is a[:, j, k]
        W, R, B = a.shape
        N = b.shape[1]
        aT, bT = a.T, b.T
        out = Buffer.zeros((N, R, B), a.dtype)
        for k in range(B):
            for j in range(R):
                for i in range(N):
                    out[i, j, k] = cos(bT[k][i], aT[k][j])
        return np.sum(softmax(out.freeze(), axis=0) * wts)

    def columns_2d(a, b, wts):        # columns kept 2-D (W, 1) by slicing, dot products as (1, W) @ (W, 1)
        W, R, B = a.shape
        N = b.shape[1]
        out = Buffer.zeros((N, R, B), a.dtype)
        for k in range(B):
            for j in range(R):
                aj = a[:, j:j + 1, k]
                na = np.sqrt((aj.T @ aj)[0, 0])
                for i in range(N):
                    bi = b[:, i:i + 1, k]
                    out[i, j, k] = (bi.T @ aj)[0, 0] / (np.sqrt((bi.T @ bi)[0, 0]) * na)
        return np.sum(softmax(out.freeze(), axis=0) * wts)

    def read_with(column, kernel=cos):  # the seed's Buffer loop with each column read as column(x, i, k)
        def loss(a, b, wts):
            W, R, B = a.shape
            N = b.shape[1]
            out = Buffer.zeros((N, R, B), a.dtype)
            for k in range(B):
                for j in range(R):
                    aj = column(a, j, k)
                    for i in range(N):
                        out[i, j, k] = kernel(column(b, i, k), aj)
            return np.sum(softmax(out.freeze(), axis=0) * wts)
        return loss

    def unit_dot(u, v):               # the cosine as the dot product of unit vectors, normalized per pair
        return np.dot(u / np.linalg.norm(u), v / np.linalg.norm(v))

    take_column = read_with(lambda x, i, k: np.take(x, i, axis=1)[:, k])   # a copy of x[:, i], then the column
    list_index = read_with(lambda x, i, k: x[:, [i], k].ravel())          # a (W, 1) copy made a vector again
    normalized_kernel = read_with(lambda x, i, k: x[:, i, k], unit_dot)    # the seed's loop, that kernel

    return dict(zip(W1_LOOP_FORMS, (inline_reads, normalized_first, lists_array, at_set, loop_order_ijk,
                                    matrix_vector, per_batch, split_enumerate, moveaxis_iterate, rows_of_transpose,
                                    columns_2d, take_column, list_index, normalized_kernel)))



def w1_vmap_code(np, Buffer=None):
    """W1 as issue 6 recommends: the kernel for two vectors, mapped with wengert.vmap over the
    columns of b, the columns of a and the batch (no Python loop). wengert only."""
    import wengert as wg
    softmax = softmax_code(np)

    def cosinesim(u, v):
        return np.dot(u, v) / (np.sqrt(np.sum(u ** 2)) * np.sqrt(np.sum(v ** 2)))

    pairwise = wg.vmap(wg.vmap(wg.vmap(cosinesim, in_axes=(1, None)), in_axes=(None, 1), out_axes=1),
                       in_axes=(2, 2), out_axes=2)

    def vmapped(a, b, wts):
        return np.sum(softmax(pairwise(b, a), axis=0) * wts)

    return {"vmap": vmapped}


def w1_hand_matmul(a, b, wts):
    """Value and gradient of sum(softmax_i(cos(b[:, i, k], a[:, j, k])) * wts), by hand.

    Batch-first views and batched matmul: the faster layout for few batches (the seed size)."""
    np = numpy
    at = a.transpose(2, 0, 1)                       # (B, W, R)
    bt = b.transpose(2, 1, 0)                       # (B, N, W)
    D = np.matmul(bt, at)                           # (B, N, R)  dot products
    na = np.sqrt(np.einsum("wjk,wjk->kj", a, a))    # (B, R)
    nb = np.sqrt(np.einsum("wik,wik->ki", b, b))    # (B, N)
    inv = 1 / (nb[:, :, None] * na[:, None, :])     # (B, N, R)
    S = D * inv
    e = np.exp(S - S.max(axis=1, keepdims=True))
    P = e / e.sum(axis=1, keepdims=True)            # softmax over i (axis 1 here)
    Wt = wts.transpose(2, 0, 1)
    PW = P * Wt
    value = PW.sum()
    gS = PW - P * PW.sum(axis=1, keepdims=True)
    gD = gS * inv
    t = gS * S
    gna = -t.sum(axis=1) / (na * na)                # (B, R): dL/dna / na
    gnb = -t.sum(axis=2) / (nb * nb)                # (B, N)
    ga = np.matmul(bt.transpose(0, 2, 1), gD)       # (B, W, R)
    gb = np.matmul(at, gD.transpose(0, 2, 1))       # (B, W, N)
    ga = ga.transpose(1, 2, 0) + a * gna.T
    gb = gb.transpose(1, 2, 0) + b * gnb.T
    return value, (ga, gb)


def w1_hand_einsum(a, b, wts):
    """The same by hand in the arrays' own layout (batch last) with einsum: the faster layout for
    many batches, where batch-first copies of ``a`` and ``b`` would cost more than the math."""
    np = numpy
    D = np.einsum("wik,wjk->ijk", b, a)             # (N, R, B)
    na = np.sqrt((a * a).sum(axis=0))               # (R, B)
    nb = np.sqrt((b * b).sum(axis=0))               # (N, B)
    inv = 1 / (nb[:, None, :] * na[None, :, :])
    S = D * inv
    e = np.exp(S - S.max(axis=0))
    P = e / e.sum(axis=0)
    PW = P * wts
    value = PW.sum()
    gS = PW - P * PW.sum(axis=0)
    gD = gS * inv
    t = gS * S
    ga = np.einsum("ijk,wik->wjk", gD, b) - a * (t.sum(axis=0) / (na * na))
    gb = np.einsum("ijk,wjk->wik", gD, a) - b * (t.sum(axis=1) / (nb * nb))
    return value, (ga, gb)


# ================================================================================================
# W2: attention over time (seed 001)
#   ys[t] = Wm @ xs[t] + bm;  z[t, b] = ys[0][:, b] . ys[t][:, b];  alpha = softmax over t;
#   C[:, b] = sum_t alpha[t, b] Hs[:, t, b];  loss = sum(C * wts).  Differentiated: Wm, bm.
# ================================================================================================
def w2_code(np, Buffer=None):
    softmax = softmax_code(np)

    def dense(Wm, bm, x):                           # Flux's Dense(in, out) with identity activation
        return Wm @ x + bm[:, None]

    def attend(z, Hs, wts):                         # softmax over time, then the context vectors
        alpha = softmax(z, axis=0)                  # (T, B)
        C = np.sum(alpha[None, :, :] * Hs, axis=1)  # (D, B)
        return np.sum(C * wts)

    def diagmatmul(Wm, bm, xs, Hs, wts):
        ys = [dense(Wm, bm, x) for x in xs]
        zs = [np.diag(ys[0].T @ y) for y in ys]     # every pair of columns, keep the diagonal
        return attend(np.stack(zs), Hs, wts)

    def colwise(Wm, bm, xs, Hs, wts):
        ys = [dense(Wm, bm, x) for x in xs]
        batch_size = ys[0].shape[1]
        y1 = [ys[0][:, b] for b in range(batch_size)]          # views of the first step's columns
        zs = [np.stack([np.dot(y1[b], y[:, b]) for b in range(batch_size)]) for y in ys]
        return attend(np.stack(zs), Hs, wts)

    def glued(Wm, bm, xt, Hs, wts):                 # xt: (in, T*B), column t*B + b is xs[t][:, b]
        out, (D, T, B) = Wm.shape[0], Hs.shape
        ys = np.reshape(dense(Wm, bm, xt), (out, T, B))
        z = np.einsum("ob,otb->tb", ys[:, 0, :], ys)   # batched dot products
        alpha = softmax(z, axis=0)
        C = np.einsum("tb,dtb->db", alpha, Hs)
        return np.sum(C * wts)

    return {"diagmatmul": diagmatmul, "colwise": colwise, "glued": glued}


def w2_spellings_code(np, Buffer=None):
    """Seed 001's per-column formulation in every spelling: the dot products z[t, b] collected in
    nested lists and stacked, written into a Buffer, or written in place into a traced zeros array;
    each dot product as ``@``, ``np.dot``, ``np.sum(u * v)`` or ``np.inner``."""
    softmax = softmax_code(np)

    def attend(z, Hs, wts):
        alpha = softmax(z, axis=0)
        return np.sum(np.sum(alpha[None, :, :] * Hs, axis=1) * wts)

    def make(container, dot):
        def loss(Wm, bm, xs, Hs, wts):
            ys = [Wm @ x + bm[:, None] for x in xs]
            T, B = len(ys), ys[0].shape[1]
            y1 = [ys[0][:, b] for b in range(B)]
            if container == "lists+stack":
                z = np.stack([np.stack([dot(y1[b], y[:, b]) for b in range(B)]) for y in ys])
                return attend(z, Hs, wts)
            z = Buffer.zeros((T, B), Wm.dtype) if container == "Buffer" else traced_zeros(np, (T, B), Wm)
            for t, y in enumerate(ys):
                for b in range(B):
                    z[t, b] = dot(y1[b], y[:, b])
            return attend(z.freeze() if container == "Buffer" else z, Hs, wts)
        return loss

    return {spelling_name(c, d): make(c, dot_spelling(np, d)) for c in CONTAINERS for d in DOT_SPELLINGS}

# more ways to write seed 001's per-column loop (benchmarks/vectorize.py --more-loops)
W2_LOOP_FORMS = ("inline, b outer", "lists+np.array", "einsum per column", "x.at[].set", "rows per step",
                 "rows of y.T", "steps stacked, Y[t, :, b]", "columns kept 2-D", "glued, Y[:, t*B + b]")


def w2_loop_forms_code(np, Buffer=None, at=None):
    """Seed 001's colwise loop written further ways (``at`` as in ``w1_loop_forms_code``)."""
    softmax = softmax_code(np)

    def attend(z, Hs, wts):
        alpha = softmax(z, axis=0)
        return np.sum(np.sum(alpha[None, :, :] * Hs, axis=1) * wts)

    def inline(Wm, bm, xs, Hs, wts):          # the columns read where they are used, b outer
        ys = [Wm @ x + bm[:, None] for x in xs]
        T, B = len(ys), ys[0].shape[1]
        z = Buffer.zeros((T, B), Wm.dtype)
        for b in range(B):
            for t in range(T):
                z[t, b] = np.dot(ys[0][:, b], ys[t][:, b])
        return attend(z.freeze(), Hs, wts)

    def lists_array(Wm, bm, xs, Hs, wts):     # nested lists made an array
        ys = [Wm @ x + bm[:, None] for x in xs]
        B = ys[0].shape[1]
        return attend(np.array([[ys[0][:, b] @ y[:, b] for b in range(B)] for y in ys]), Hs, wts)

    def einsum_columns(Wm, bm, xs, Hs, wts):  # an einsum per column, lists + stack
        ys = [Wm @ x + bm[:, None] for x in xs]
        B = ys[0].shape[1]
        z = np.stack([np.stack([np.einsum("i,i->", ys[0][:, b], y[:, b]) for b in range(B)]) for y in ys])
        return attend(z, Hs, wts)

    def at_set(Wm, bm, xs, Hs, wts):          # functional updates, one per element
        ys = [Wm @ x + bm[:, None] for x in xs]
        T, B = len(ys), ys[0].shape[1]
        z = np.zeros((T, B), Wm.dtype)
        for t in range(T):
            for b in range(B):
                z = at(z)[t, b].set(np.dot(ys[0][:, b], ys[t][:, b]))
        return attend(z, Hs, wts)

    def rows_per_step(Wm, bm, xs, Hs, wts):   # a loop over the steps only, each row one sum
        ys = [Wm @ x + bm[:, None] for x in xs]
        return attend(np.stack([np.sum(ys[0] * y, axis=0) for y in ys]), Hs, wts)

    def rows_of_transpose(Wm, bm, xs, Hs, wts):   # columns as rows of the transposes, enumerate the steps
        ys = [Wm @ x + bm[:, None] for x in xs]
        T, B = len(ys), ys[0].shape[1]
        z = Buffer.zeros((T, B), Wm.dtype)
        for t, y in enumerate(ys):
            for b in range(B):
                z[t, b] = ys[0].T[b] @ y.T[b]
        return attend(z.freeze(), Hs, wts)

    def steps_stacked(Wm, bm, xs, Hs, wts):       # the steps' outputs stacked into one array, then read
        Y = np.stack([Wm @ x + bm[:, None] for x in xs])
        T, _, B = Y.shape
        z = Buffer.zeros((T, B), Wm.dtype)
        for t in range(T):
            for b in range(B):
                z[t, b] = np.dot(Y[0, :, b], Y[t, :, b])
        return attend(z.freeze(), Hs, wts)

    def columns_2d(Wm, bm, xs, Hs, wts):          # columns kept 2-D (out, 1) by slicing, (1, out) @ (out, 1)
        ys = [Wm @ x + bm[:, None] for x in xs]
        T, B = len(ys), ys[0].shape[1]
        z = Buffer.zeros((T, B), Wm.dtype)
        for t in range(T):
            for b in range(B):
                z[t, b] = (ys[0][:, b:b + 1].T @ ys[t][:, b:b + 1])[0, 0]
        return attend(z.freeze(), Hs, wts)

    def glued_columns(Wm, bm, xs, Hs, wts):       # the steps glued first (one product), then their columns
        T, B = len(xs), xs[0].shape[1]
        Y = Wm @ np.hstack(xs) + bm[:, None]
        z = Buffer.zeros((T, B), Wm.dtype)
        for t in range(T):
            for b in range(B):
                z[t, b] = np.dot(Y[:, b], Y[:, t * B + b])
        return attend(z.freeze(), Hs, wts)

    return dict(zip(W2_LOOP_FORMS, (inline, lists_array, einsum_columns, at_set, rows_per_step, rows_of_transpose,
                                    steps_stacked, columns_2d, glued_columns)))



def w2_hand(Wm, bm, xt, Hs, wts):
    """Value and gradient (w.r.t. Wm, bm) of the attention loss, by hand, on glued inputs."""
    np = numpy
    out = Wm.shape[0]
    D, T, B = Hs.shape
    yt = np.dot(Wm, xt)
    yt += bm[:, None]
    ys = yt.reshape(out, T, B)
    y1 = ys[:, 0, :]
    z = np.einsum("ob,otb->tb", y1, ys)
    e = np.exp(z - z.max(axis=0))
    alpha = e / e.sum(axis=0)
    ga = np.einsum("db,dtb->tb", wts, Hs)           # dL/dalpha
    value = np.sum(alpha * ga)                      # = sum(C * wts) with C = sum_t alpha Hs
    gz = alpha * (ga - np.sum(alpha * ga, axis=0))
    gys = gz[None, :, :] * y1[:, None, :]          # d z[t,b] / d ys[:, t, b] = y1[:, b]
    gys[:, 0, :] += np.einsum("tb,otb->ob", gz, ys)  # and through y1 = ys[:, 0, :]
    gyt = gys.reshape(out, T * B)
    return value, (np.dot(gyt, xt.T), gyt.sum(axis=1))


# ================================================================================================
# W3: MLP 784-300-100-10, sigmoid hidden layers, softmax cross-entropy (seed 002)
# ================================================================================================
def w3_code(np, Buffer=None):
    softmax = softmax_code(np)

    def sigmoid(x):
        return 1 / (1 + np.exp(-x))

    def forward(params, x):
        W1, b1, W2, b2, W3, b3 = params
        h1 = sigmoid(x @ W1 + b1)
        h2 = sigmoid(h1 @ W2 + b2)
        return h2 @ W3 + b3

    def log_of_softmax(params, x, y):               # the textbook composition: log(softmax(z))
        p = softmax(forward(params, x), axis=1)
        return -np.sum(y * np.log(p)) / x.shape[0]

    def logsumexp_form(params, x, y):               # the stable log-softmax a careful user writes
        z = forward(params, x)
        m = np.max(z, axis=1, keepdims=True)
        logp = z - m - np.log(np.sum(np.exp(z - m), axis=1, keepdims=True))
        return -np.sum(y * logp) / x.shape[0]

    return {"log(softmax)": log_of_softmax, "logsumexp": logsumexp_form}


def w3_hand(params, x, y):
    """Value and gradient (w.r.t. params) of the MLP's mean cross-entropy, by hand."""
    np = numpy
    W1, b1, W2, b2, W3, b3 = params
    n = x.shape[0]
    h1 = 1 / (1 + np.exp(-(np.dot(x, W1) + b1)))
    h2 = 1 / (1 + np.exp(-(np.dot(h1, W2) + b2)))
    z = np.dot(h2, W3) + b3
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    s = e.sum(axis=1, keepdims=True)
    value = -np.sum(y * (z - np.log(s))) / n
    d3 = (e / s * y.sum(axis=1, keepdims=True) - y) / n   # softmax - target (rows of y sum to 1)
    d2 = np.dot(d3, W3.T) * h2 * (1 - h2)
    d1 = np.dot(d2, W2.T) * h1 * (1 - h1)
    grads = (np.dot(x.T, d1), d1.sum(axis=0), np.dot(h1.T, d2), d2.sum(axis=0),
             np.dot(h2.T, d3), d3.sum(axis=0))
    return value, (grads,)


# ================================================================================================
# W4: a record of n parameter arrays of which the loss reads 3 (seed 002's "redundant updates")
# ================================================================================================
@dataclass
class Params3:
    w0: Any
    w1: Any
    w2: Any


@dataclass
class Params10:
    w0: Any
    w1: Any
    w2: Any
    w3: Any
    w4: Any
    w5: Any
    w6: Any
    w7: Any
    w8: Any
    w9: Any


def w4_code(np, Buffer=None):
    def record_loss(p, wts):                        # reads 3 fields, whatever the record holds
        return np.sum(wts * np.tanh(p.w0 * p.w1 + p.w2))

    return {"record": record_loss}


def w4_hand(p, wts):
    np = numpy
    t = np.tanh(p.w0 * p.w1 + p.w2)
    value = np.sum(wts * t)
    g = wts * (1 - t * t)
    grads = {f.name: None for f in dataclasses.fields(p)}
    grads.update(w0=g * p.w1, w1=g * p.w0, w2=g)
    for name, v in grads.items():
        if v is None:                               # np.zeros: pages are zeroed when first touched
            grads[name] = np.zeros(getattr(p, name).shape, getattr(p, name).dtype)
    return value, (type(p)(**grads),)


def w5_code(np, Buffer=None):
    """An Elman recurrence h_t = tanh(W h_{t-1} + U x_t), loss sum_t <h_t, c_t>: the loop of an RNN,
    an ODE integrator or a filter, spelled with ``@``, with ``np.dot``, and as a list of states
    stacked at the end."""
    def with_matmul(W, U, xs, cs):
        h = np.tanh(U @ xs[0])
        loss = np.sum(h * cs[0])
        for t in range(1, xs.shape[0]):
            h = np.tanh(W @ h + U @ xs[t])
            loss = loss + np.sum(h * cs[t])
        return loss

    def with_dot(W, U, xs, cs):
        h = np.tanh(np.dot(U, xs[0]))
        loss = np.dot(h, cs[0])
        for t in range(1, xs.shape[0]):
            h = np.tanh(np.dot(W, h) + np.dot(U, xs[t]))
            loss = loss + np.dot(h, cs[t])
        return loss

    def with_list(W, U, xs, cs):
        hs = [np.tanh(U @ xs[0])]
        for t in range(1, xs.shape[0]):
            hs.append(np.tanh(W @ hs[-1] + U @ xs[t]))
        return np.sum(np.stack(hs) * cs)

    return {"loop[@]": with_matmul, "loop[np.dot]": with_dot, "loop[lists+stack]": with_list}


def w5_hand(W, U, xs, cs):
    """The recurrence forward step by step; backward step by step through W only, the weight
    cotangents as two matrix products over all steps at the end."""
    np = numpy
    T, H = xs.shape[0], W.shape[0]
    P = xs @ U.T
    hs = np.empty((T, H), W.dtype)
    h = hs[0] = np.tanh(P[0])
    for t in range(1, T):
        h = hs[t] = np.tanh(W @ h + P[t])
    value = np.sum(hs * cs)
    G = np.empty_like(hs)
    back = np.zeros(H, W.dtype)
    for t in range(T - 1, -1, -1):
        G[t] = g = (cs[t] + back) * (1 - hs[t] * hs[t])
        back = g @ W
    return value, (G[1:].T @ hs[:-1], G.T @ xs)


# ================================================================================================
# Rows
# ================================================================================================
@dataclass
class Row:
    """One line of the table: a formulation of a workload at one size."""
    workload: str                   # "W1"
    size: str                       # "seed", "16x", "B=128", "n=10", ...
    formulation: str                # key into the code dict
    code: Callable                  # w1_code, ...
    hand: Callable                  # hand-written value-and-gradient
    args: tuple                     # plain NumPy inputs (pytrees allowed)
    argnums: tuple                  # which arguments are differentiated
    hand_args: tuple = None         # inputs of ``hand`` when they differ (W2: glued xt)
    loop_iterations: int = 0        # Python-level loop trips of the formulation (0: vectorized)
    wengert_only: bool = False      # a formulation only wengert has (vmap): no peers
    spelling: tuple = None          # (container, dot product) of a loop spelling row
    notes: list = field(default_factory=list)

    @property
    def name(self):
        return f"{self.workload} {self.size} {self.formulation}"


def _rng(seed):
    return numpy.random.default_rng(seed)


def _glorot(rng, fan_in, fan_out, shape):
    limit = numpy.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, shape).astype(F32)


def w1_rows(quick):
    # 16x: the batch B grows 16x, so every array and the loop's trip count grow exactly 16x.
    # The hand-written reference uses, per size, the faster of its two layouts on this machine.
    sizes = [("seed", (3, 5, 2, 2) if quick else (16, 64, 4, 16), w1_hand_matmul),
             ("16x", (3, 5, 2, 4) if quick else (16, 64, 4, 256), w1_hand_einsum)]
    rows = []
    for label, (N, W, R, B), hand in sizes:
        rng = _rng(0)
        a = rng.random((W, R, B), dtype=F32)
        b = rng.random((W, N, B), dtype=F32)
        wts = rng.standard_normal((N, R, B)).astype(F32)
        label = f"{label} N,W,R,B={N},{W},{R},{B}"
        for form in ("vectorized", "loop"):
            rows.append(Row("W1", label, form, w1_code, hand, (a, b, wts), (0, 1),
                            loop_iterations=N * R * B if form == "loop" else 0))
        rows.append(Row("W1", label, "vmap", w1_vmap_code, hand, (a, b, wts), (0, 1), wengert_only=True))
        if label.startswith("seed"):   # every spelling of the loop, at the seed's size
            for c in CONTAINERS:
                for d in DOT_SPELLINGS:
                    rows.append(Row("W1", label, spelling_name(c, d), w1_spellings_code, hand, (a, b, wts), (0, 1),
                                    loop_iterations=N * R * B, spelling=(c, d)))
    return rows


def w2_rows(quick):
    T, B, n_in, n_out, D = (4, 3, 5, 4, 6) if quick else (256, 128, 64, 32, 100)
    rng = _rng(1)
    Wm = _glorot(rng, n_in, n_out, (n_out, n_in))
    bm = (0.1 * rng.standard_normal(n_out)).astype(F32)
    xs = [rng.random((n_in, B), dtype=F32) for _ in range(T)]
    xt = numpy.concatenate(xs, axis=1)              # glued outside the timed code, as in the seed
    Hs = rng.random((D, T, B), dtype=F32)
    wts = rng.standard_normal((D, B)).astype(F32)
    label = f"T,B,in,out,D={T},{B},{n_in},{n_out},{D}"
    return [
        Row("W2", label, "diagmatmul", w2_code, w2_hand, (Wm, bm, xs, Hs, wts), (0, 1),
            hand_args=(Wm, bm, xt, Hs, wts), loop_iterations=T),
        Row("W2", label, "colwise", w2_code, w2_hand, (Wm, bm, xs, Hs, wts), (0, 1),
            hand_args=(Wm, bm, xt, Hs, wts), loop_iterations=T * B),
        Row("W2", label, "glued", w2_code, w2_hand, (Wm, bm, xt, Hs, wts), (0, 1)),
    ] + [Row("W2", label, spelling_name(c, d), w2_spellings_code, w2_hand, (Wm, bm, xs, Hs, wts), (0, 1),
             hand_args=(Wm, bm, xt, Hs, wts), loop_iterations=T * B, spelling=(c, d))
         for c in CONTAINERS for d in DOT_SPELLINGS]


def w3_rows(quick):
    layers = (20, 12, 8, 5) if quick else (784, 300, 100, 10)
    rows = []
    for batch in ((1, 3) if quick else (1, 128)):
        rng = _rng(2)
        params = []
        for fan_in, fan_out in zip(layers[:-1], layers[1:]):
            params.append(_glorot(rng, fan_in, fan_out, (fan_in, fan_out)))
            params.append((0.1 * rng.standard_normal(fan_out)).astype(F32))
        params = tuple(params)
        x = rng.random((batch, layers[0]), dtype=F32)
        y = numpy.eye(layers[-1], dtype=F32)[rng.integers(0, layers[-1], batch)]
        for form in ("log(softmax)", "logsumexp"):
            rows.append(Row("W3", f"batch={batch}", form, w3_code, w3_hand, (params, x, y), (0,)))
    return rows


def w4_rows(quick):
    shape = (6, 5) if quick else (512, 512)
    rows = []
    for cls in (Params10, Params3):
        rng = _rng(3)
        n = len(dataclasses.fields(cls))
        fields = {f"w{i}": (0.5 * rng.standard_normal(shape)).astype(F32) for i in range(n)}
        wts = _rng(4).standard_normal(shape).astype(F32)
        rows.append(Row("W4", f"n={n} {shape[0]}x{shape[1]}", "record", w4_code, w4_hand,
                        (cls(**fields), wts), (0,)))
    return rows


def w5_rows(quick):
    T, H, D = (5, 6, 4) if quick else (100, 64, 32)
    rng = _rng(5)
    W = (0.5 / numpy.sqrt(H) * rng.standard_normal((H, H))).astype(F32)
    U = _glorot(rng, D, H, (H, D))
    xs = rng.standard_normal((T, D)).astype(F32)
    cs = rng.standard_normal((T, H)).astype(F32)
    return [Row("W5", f"T,H,D={T},{H},{D}", form, w5_code, w5_hand, (W, U, xs, cs), (0, 1), loop_iterations=T)
            for form in ("loop[@]", "loop[np.dot]", "loop[lists+stack]")]


WORKLOADS = {"W1": w1_rows, "W2": w2_rows, "W3": w3_rows, "W4": w4_rows, "W5": w5_rows}


def rows(quick=False, only=None):
    """All benchmark rows; ``only``: tokens "W1" (a workload) or "W2:colwise" (one formulation)."""
    out = []
    for wid, make in WORKLOADS.items():
        if only and not any(tok.partition(":")[0] == wid for tok in only):
            continue
        out.extend(row for row in make(quick) if not only or _matches(row, only))
    return out


def _matches(row, only):
    for tok in only:
        wid, _, form = tok.partition(":")
        if wid == row.workload and (not form or form in row.formulation):
            return True
    return False
