"""scipy.integrate.odeint with derivatives in the initial state, the times and the extra arguments.

``odeint(func, y0, t, args=(), ...)`` has SciPy's signature and, on plain values, is SciPy's own
call. Given traced values it is one primitive whose rules solve other ODEs with SciPy's solver:

* reverse mode by the adjoint method (as JAX's and autograd's odeint): between consecutive output
  times, backwards, the state ``y``, its adjoint ``a`` (``a' = -a df/dy``) and the accumulated
  ``args`` cotangent (``-a df/dargs``) are integrated together, restarting ``y`` from the forward
  solution at each output time. The products ``a df/dy`` are wengert's ``vjp`` of ``func``.
  Memory does not grow with the solver's steps: nothing of the forward solve is kept but ``ys``.
* forward mode by the forward sensitivity equations: ``y`` and its tangent ``s``
  (``s' = df/dy s + df/dargs dargs``, from wengert's ``jvp`` of ``func``) integrated together.
* the times: ``dy(t_i)/dt_i = f(y_i, t_i)``, and moving ``t_0`` with ``y0`` held starts the
  solution at ``-f(y0, t0)``, carried to every output by the sensitivity (or adjoint) equations.

The rules call this same primitive, so derivatives of derivatives (``grad(grad)``, ``hvp``) are
those of the adjoint and sensitivity systems, again solved by SciPy. Derivatives are those of the
exact flow, computed to the solver's tolerances ``rtol``/``atol``, not of the discrete steps SciPy
took. The adjoint solve recomputes ``y`` backwards in time, as JAX's and autograd's do: for stiff,
strongly contracting dynamics that is unstable, and forward mode (which runs forwards) is the
route there.
"""
from __future__ import annotations

import numpy as np
import scipy.integrate as _si

from ..core import tree
from ..core.trace import Tracer, unbox
from ..numpy import _functions as F
from ..primitives._batching import one_batch_axis
from ..primitives._table import defprim
from ..transforms.batching import vmap
from ..transforms.forward import jvp
from ..transforms.reverse import vjp

__all__ = ["odeint"]


def _contains_tracer(x):
    return any(type(leaf) is Tracer for leaf in tree.flatten(x)[0])


class _System:
    """``func`` as the rules see it: ``rhs(y, t, *traced_leaves)`` with the plain leaves of
    ``args`` held in place, whatever the argument order (``tfirst``)."""

    def __init__(self, func, tfirst, treedef, leaves, traced_slots):
        self.func, self.tfirst, self.treedef = func, tfirst, treedef
        self.leaves, self.traced_slots = leaves, traced_slots

    def args(self, traced):
        leaves = list(self.leaves)
        for slot, value in zip(self.traced_slots, traced):
            leaves[slot] = value
        return tree.unflatten(self.treedef, leaves)

    def __call__(self, y, t, *traced):
        args = self.args(traced)
        out = self.func(t, y, *args) if self.tfirst else self.func(y, t, *args)
        return F.reshape(F.as_traced_operand(out), (-1,))   # SciPy takes lists and scalars too


class _Jacobian:
    """The user's ``Dfun`` on plain values (the forward solve only), ``args`` rebuilt as for func."""

    def __init__(self, dfun, system):
        self.dfun, self.system = dfun, system

    def __call__(self, y, t, *traced):
        args = self.system.args(traced)
        return self.dfun(t, y, *args) if self.system.tfirst else self.dfun(y, t, *args)


class _Adjoint:
    """The adjoint system, backwards in time: the state ``z = (y, a, args_bar...)`` flattened."""

    def __init__(self, system, size, leaf_shapes):
        self.system, self.size, self.leaf_shapes = system, size, leaf_shapes

    def __call__(self, z, t, *leaves):
        n = self.size
        y, a = z[:n], z[n:2 * n]
        fy, pull = vjp(lambda y, *lv: self.system(y, t, *lv), y, *leaves)
        bars = pull(a)
        return F.concatenate([F.reshape(fy, (n,)), -F.reshape(bars[0], (n,))]
                             + [-F.reshape(b, (-1,)) for b in bars[1:]])


class _Sensitivity:
    """The forward sensitivity system: the state ``z = (y, s)``; the leaves are the traced leaves
    of ``args`` followed by the tangents of those among them that have one (slots ``with_tangent``)."""

    def __init__(self, system, size, count, with_tangent):
        self.system, self.size, self.count, self.with_tangent = system, size, count, with_tangent

    def __call__(self, z, t, *leaves):
        n = self.size
        y, s = z[:n], z[n:]
        primals, tangents = list(leaves[:self.count]), leaves[self.count:]

        def moved(y, *varied):
            lv = list(primals)
            for slot, value in zip(self.with_tangent, varied):
                lv[slot] = value
            return self.system(y, t, *lv)

        fy, ft = jvp(moved, (y, *[primals[k] for k in self.with_tangent]), (s, *tangents))
        return F.concatenate([F.reshape(fy, (n,)), F.reshape(ft, (n,))])


class _Batched:
    """vmap's batch as one larger system: ``size`` copies of the state side by side, ``func`` run
    under vmap, so SciPy solves the batch in one call (one step size for all of it)."""

    def __init__(self, system, size, n, batched_leaves):
        self.system, self.size, self.n = system, size, n
        self.in_axes = (0,) + tuple(0 if b else None for b in batched_leaves)

    def __call__(self, z, t, *leaves):
        def one(y, *lv):
            return self.system(y, t, *lv)

        out = vmap(one, in_axes=self.in_axes)(F.reshape(z, (self.size, self.n)), *leaves)
        return F.reshape(out, (-1,))


def _odeint_batch(prim, vals, batched, params, size):
    """vmap of odeint over ``y0`` and ``args`` (not ``t``: each example would need its own output
    times, which one solve cannot give; that case runs once per example)."""
    y0, t, *leaves = vals
    if batched[1]:
        return NotImplemented
    n = y0.shape[-1]
    y0 = y0 if batched[0] else F.broadcast_to(y0, (size, n))
    joint = _Batched(params["system"], size, n, batched[2:])
    zs = prim(F.reshape(y0, (size * n,)), t, *leaves, system=joint, options=params["options"])
    return F.moveaxis(F.reshape(zs, (zs.shape[0], size, n)), 1, 0)


def _refusing_tracers(func):
    """``func`` as SciPy calls it, with a clear error if it returns a traced value."""
    def rhs(*a):
        out = func(*a)
        if _contains_tracer(out):
            raise ValueError(_CLOSURE)
        return out
    return rhs


_CLOSURE = ("odeint: func returned a traced value when called on plain arrays: it closes over a "
            "value being differentiated. Pass that value through args=(...) instead (odeint "
            "differentiates args; a value func reads from its enclosing scope it cannot see).")


def _odeint_impl(y0, t, *leaves, system, options, jacobian=None):
    return _si.odeint(_refusing_tracers(system), y0, t, args=tuple(leaves), Dfun=jacobian, **options)


def _zeros_like(x):
    return np.zeros(np.shape(unbox(x)) if type(x) is not Tracer else tuple(x.shape),
                    np.float64 if type(x) is Tracer else np.result_type(unbox(x), np.float64))


def _odeint_vjp(g, ys, args, params, parents):
    """The adjoint method, one backward solve per interval between output times."""
    y0, t, *leaves = args
    system, options = params["system"], params["options"]
    wanted = {position for position, _ in parents}
    n = ys.shape[1]
    count = ys.shape[0]
    shapes = [tuple(np.shape(unbox(leaf))) if type(leaf) is not Tracer else tuple(leaf.shape)
              for leaf in leaves]
    sizes = [int(np.prod(s, dtype=int)) for s in shapes]
    adjoint = _Adjoint(system, n, shapes)
    a = g[count - 1]
    leaf_bars = [None] * len(leaves)
    t_bars = [None] * count
    for i in range(count - 1, 0, -1):
        if 1 in wanted:
            t_bars[i] = F.sum(g[i] * system(ys[i], t[i], *leaves))
        z0 = F.concatenate([ys[i], a] + [np.zeros(size) for size in sizes])
        z = odeint_primitive(z0, F.stack([t[i], t[i - 1]]), *leaves, system=adjoint, options=options)[1]
        a = z[n:2 * n] + g[i - 1]
        start = 2 * n
        for k, (shape, size) in enumerate(zip(shapes, sizes)):
            piece = F.reshape(z[start:start + size], shape)
            leaf_bars[k] = piece if leaf_bars[k] is None else leaf_bars[k] + piece
            start += size
    out = []
    for position, _ in parents:
        if position == 0:
            out.append(a)
        elif position == 1:
            t_bars[0] = -F.sum((a - g[0]) * system(y0, t[0], *leaves))
            out.append(F.stack([tb if tb is not None else np.zeros(()) for tb in t_bars]))
        else:
            k = position - 2
            out.append(leaf_bars[k] if leaf_bars[k] is not None else _zeros_like(leaves[k]))
    return out


def _odeint_jvp(tangents, ys, args, params):
    """Forward sensitivities: ``y`` and its tangent integrated together over all output times."""
    y0, t, *leaves = args
    ty0, tt, *tleaves = tangents
    system, options = params["system"], params["options"]
    with_tangent = [k for k, tl in enumerate(tleaves) if tl is not None]
    if ty0 is None and tt is None and not with_tangent:
        return None
    n = ys.shape[1]
    s0 = ty0 if ty0 is not None else np.zeros(n)
    if tt is not None:
        s0 = s0 - system(y0, t[0], *leaves) * tt[0]
    sensitivity = _Sensitivity(system, n, len(leaves), with_tangent)
    zs = odeint_primitive(F.concatenate([y0, s0]), t, *leaves, *[tleaves[k] for k in with_tangent],
                          system=sensitivity, options=options)
    out = zs[:, n:]
    if tt is not None:
        slopes = F.stack([system(ys[i], t[i], *leaves) for i in range(ys.shape[0])])
        out = out + slopes * F.reshape(tt, (-1, 1))
    return out


# keep_ans: the adjoint restarts y from the forward solution ys
odeint_primitive = defprim(_odeint_impl, name="scipy.integrate.odeint", fused_vjp=_odeint_vjp, fused_jvp=_odeint_jvp,
                           batch=one_batch_axis(_odeint_batch), keep_ans=True)


def odeint(func, y0, t, args=(), Dfun=None, col_deriv=0, full_output=0, ml=None, mu=None,
           rtol=None, atol=None, tcrit=None, h0=0.0, hmax=0.0, hmin=0.0, ixpr=0, mxstep=0,
           mxhnil=0, mxordn=12, mxords=5, printmessg=0, tfirst=False):
    """``scipy.integrate.odeint``: ``y' = func(y, t, *args)`` (``func(t, y, *args)`` with
    ``tfirst=True``) solved at the times ``t``, an array of shape ``(len(t), len(y0))``.

    Differentiable in ``y0``, ``t`` and the floating-point leaves of ``args`` (each entry of
    ``args`` may be a pytree of arrays), in reverse mode by the adjoint method and in forward mode
    by the sensitivity equations (the module's docstring). ``func`` must be written with
    ``wengert.numpy`` and must read what it differentiates through ``args``, not from an
    enclosing scope. ``Dfun`` serves the forward solve only; ``full_output`` needs plain values.
    """
    if not isinstance(args, tuple):
        args = (args,)   # as SciPy does
    leaves, treedef = tree.flatten(args)
    traced_slots = [k for k, leaf in enumerate(leaves) if type(leaf) is Tracer]
    if type(y0) is not Tracer and type(t) is not Tracer and not traced_slots \
            and not _contains_tracer(y0) and not _contains_tracer(t):
        return _si.odeint(_refusing_tracers(func), y0, t, args=args, Dfun=Dfun, col_deriv=col_deriv,
                          full_output=full_output, ml=ml, mu=mu, rtol=rtol, atol=atol, tcrit=tcrit,
                          h0=h0, hmax=hmax, hmin=hmin, ixpr=ixpr, mxstep=mxstep, mxhnil=mxhnil,
                          mxordn=mxordn, mxords=mxords, printmessg=printmessg, tfirst=tfirst)
    if full_output:
        raise NotImplementedError(
            "odeint: full_output=True on values being differentiated is not supported (the solver's "
            "diagnostics have no derivative); call odeint on plain arrays for them.")
    y0 = F.as_traced_operand(y0)
    t = F.as_traced_operand(t)
    for name, value in (("y0", y0), ("t", t)):
        if np.iscomplexobj(unbox(value)):
            raise TypeError(f"odeint: {name} is complex; SciPy's odeint solves real systems only "
                            "(split it into real and imaginary parts).")
    if y0.ndim > 1:
        raise ValueError(f"odeint: y0 must be one-dimensional (as in SciPy), got shape {tuple(y0.shape)}")
    if t.ndim != 1:
        raise ValueError(f"odeint: t must be a one-dimensional array of times, got shape {tuple(t.shape)}")
    if y0.ndim == 0:
        y0 = F.reshape(y0, (1,))
    if type(y0) is not Tracer and not np.issubdtype(y0.dtype, np.floating):
        y0 = y0.astype(np.float64)
    if type(t) is not Tracer and not np.issubdtype(t.dtype, np.floating):
        t = t.astype(np.float64)
    plain_leaves = [None if k in traced_slots else leaf for k, leaf in enumerate(leaves)]
    system = _System(func, bool(tfirst), treedef, plain_leaves, traced_slots)
    options = dict(col_deriv=col_deriv, ml=ml, mu=mu, rtol=rtol, atol=atol, tcrit=tcrit,
                   h0=h0, hmax=hmax, hmin=hmin, ixpr=ixpr, mxstep=mxstep, mxhnil=mxhnil,
                   mxordn=mxordn, mxords=mxords, printmessg=printmessg)
    jacobian = None if Dfun is None else _Jacobian(Dfun, system)   # the forward solve's only
    return odeint_primitive(y0, t, *[leaves[k] for k in traced_slots], system=system,
                            options=options, jacobian=jacobian)
