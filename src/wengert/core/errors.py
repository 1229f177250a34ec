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


def run_user(f, args, kwargs):
    """``f(*args, **kwargs)``: the user's function, run by a transform, with wengert's own error in
    place of NumPy's for a traced value written into a plain array.

    ``out[i] = v`` into a plain NumPy array converts ``v`` with ``float()`` (``int()``, ``complex()``).
    When that fails on an object with ``__getitem__``, as every tracer has, NumPy raises its own
    ``ValueError: setting an array element with a sequence``, whatever the failure was, with the
    failure as the direct cause. Where the cause is wengert's (TracerConversionError: the write would
    drop a gradient; NeedsLoop: vmap's signal to run once per example), the transform raises that
    cause in the ValueError's place, with the ValueError's traceback, which ends at the user's line.
    """
    try:
        return f(*args, **kwargs)
    except ValueError as error:
        cause = error.__cause__
        if type(error) is not ValueError or not isinstance(cause, (TracerConversionError, NeedsLoop)):
            raise
        raise cause.with_traceback(error.__traceback__) from None
