"""Errors the engine raises. Each one says what happened and what to do instead."""


class WengertError(Exception):
    """Base class of wengert's own errors."""


class LeakedTracerError(WengertError):
    def __init__(self, what):
        super().__init__(
            f"{what}: a traced value was used after the transform that created it (grad, vjp, ...) "
            "had returned. Traced values live only inside the function being differentiated; "
            "return plain results from it (or use has_aux=True) instead of storing tracers "
            "in globals or closures."
        )


class NoDerivativeError(WengertError, NotImplementedError):
    def __init__(self, name, message=None):
        super().__init__(message or (
            f"{name} has no derivative rule in wengert. Define one with @wengert.custom_vjp "
            "(or wengert.op), or compute this value outside the differentiated function."
        ))


class NeedsLoop(Exception):
    """The batched run cannot express this case (a batching rule, or the engine meeting a batched
    value where it cannot): vmap runs the whole function once per example instead, with a warning.
    It is the only signal vmap falls back on; any other exception is an error and surfaces as it is."""


class NonDifferentiableInputError(WengertError, TypeError):
    pass


class NonScalarOutputError(WengertError, TypeError):
    pass


class TracerConversionError(WengertError, TypeError):
    """A traced value was turned into a plain NumPy array or written into one, which would drop its
    gradient (a TypeError, as NumPy raises for values it cannot convert)."""


class GradientDroppedWarning(UserWarning):
    """A traced value was turned into a Python number (``float()``, ``.item()``, ``math.*``): the
    number carries no gradient. ``float(wg.stop_gradient(x))`` says it on purpose, silently."""


class BackendError(WengertError, TypeError):
    """An operation a non-NumPy array library (Dask, CuPy, an array-API namespace) cannot do the way
    wengert needs it (lazily, on its device); the message names the operation and what to do."""
