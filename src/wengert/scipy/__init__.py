"""wengert.scipy: SciPy's names, differentiable (``special``, ``stats``, ``signal``, ``linalg``).

SciPy is an optional dependency: ``pip install 'wengert[scipy]'`` (or ``pip install scipy``).
"""
try:
    import scipy  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "wengert.scipy needs SciPy, which is an optional dependency of wengert: install it with "
        "pip install 'wengert[scipy]' (or pip install scipy)") from error

from . import integrate, linalg, signal, special, stats  # noqa: E402,F401

__all__ = ["integrate", "linalg", "signal", "special", "stats"]
