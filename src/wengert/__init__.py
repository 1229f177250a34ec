"""wengert: automatic differentiation of ordinary NumPy code: reverse and forward mode, vmap.

    import wengert as wg
    import wengert.numpy as wnp

    loss = lambda w, x: wnp.sum(wnp.tanh(x @ w) ** 2)
    g = wg.grad(loss)(w, x)
"""
from . import numpy  # noqa: F401  (installs the ndarray behaviour of tracers)
from . import tree
from .buffer import Buffer, at
from .core.mutation import InPlaceWriteError
from .core.errors import (GradientDroppedWarning, LeakedTracerError, NoDerivativeError,
                          NonDifferentiableInputError, NonScalarOutputError, TracerConversionError,
                          BackendError, WengertError)
from .core.trace import Tracer
from .transforms.check import check_grads
from .profiling import profile
from .transforms.reverse import grad, jacobian, value_and_grad, vjp
from .transforms.forward import hessian, hvp, jacfwd, jacrev, jvp, linearize
from .transforms.batching import vmap
from .transforms.custom import CustomGradientError, custom_vjp, op
from .transforms.extras import checkpoint, elementwise_grad, stop_gradient
from .transforms.jit import ConcretizationError, jit
from . import flatten_util  # noqa: F401
from . import nn, rewrites  # noqa: F401  (rewrites: log of known compositions records the fused op)
from .config import config

__version__ = "0.1.0"

__all__ = [
    "Buffer", "at", "InPlaceWriteError",
    "grad", "value_and_grad", "vjp", "jacobian", "jacrev", "hessian", "jvp", "linearize", "jacfwd", "hvp", "vmap", "check_grads", "tree", "profile",
    "numpy", "Tracer", "WengertError", "LeakedTracerError", "NoDerivativeError",
    "NonDifferentiableInputError", "NonScalarOutputError",
    "custom_vjp", "op", "CustomGradientError", "config", "nn",
    "elementwise_grad", "checkpoint", "flatten_util", "stop_gradient",
    "GradientDroppedWarning", "TracerConversionError",
    "jit", "ConcretizationError",
]
