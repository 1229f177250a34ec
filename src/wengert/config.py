"""Global switches: ``wg.config.update(name, value)``, ``wg.config.read(name)``.

=========================  =======  =========================================================
name                       default  what it does
=========================  =======  =========================================================
``rewrites``               True     record fused, stable operations for known compositions
                                    (``log(softmax(x))``, ``log(sum(exp(x)))``, ...); see
                                    docs/rewrites.md. Environment: ``WENGERT_REWRITES=0``.
``check_custom_gradients`` False    check every ``custom_vjp`` / ``op`` rule against finite
                                    differences on its first differentiated call with each
                                    shape (a debugging aid; costly). Environment:
                                    ``WENGERT_CHECK_CUSTOM_GRADIENTS=1``.
=========================  =======  =========================================================

The engine reads each switch as a plain attribute (``config.rewrites``), so a switch that is off
costs nothing. ``with wg.config.override(rewrites=False): ...`` sets switches for a block.
"""
from __future__ import annotations

import contextlib
import os

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _env_flag(variable, default):
    raw = os.environ.get(variable)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"environment variable {variable}={raw!r}: expected 1/0, true/false, yes/no or on/off")


class Config:
    """wengert's switches. Read them as attributes; change them with :meth:`update`."""

    _NAMES = ("rewrites", "check_custom_gradients")

    def __init__(self):
        self.rewrites = _env_flag("WENGERT_REWRITES", True)
        self.check_custom_gradients = _env_flag("WENGERT_CHECK_CUSTOM_GRADIENTS", False)
        self._on_change = {}

    def update(self, name, value):
        """Set switch ``name`` to ``value`` (a bool)."""
        if name not in self._NAMES:
            raise KeyError(f"wengert.config has no switch {name!r}; the switches are {', '.join(self._NAMES)}")
        if not isinstance(value, (bool, int)):
            raise TypeError(f"wengert.config.update({name!r}, ...): expected True or False, got {value!r}")
        value = bool(value)
        setattr(self, name, value)
        hook = self._on_change.get(name)
        if hook is not None:
            hook(value)

    def read(self, name):
        if name not in self._NAMES:
            raise KeyError(f"wengert.config has no switch {name!r}; the switches are {', '.join(self._NAMES)}")
        return getattr(self, name)

    @contextlib.contextmanager
    def override(self, **values):
        """Set switches for the duration of a ``with`` block, then restore them."""
        old = {name: self.read(name) for name in values}
        try:
            for name, value in values.items():
                self.update(name, value)
            yield self
        finally:
            for name, value in old.items():
                self.update(name, value)

    def on_change(self, name, hook):
        """Call ``hook(value)`` whenever switch ``name`` changes (used by the engine's modules)."""
        self._on_change[name] = hook

    def __repr__(self):
        return "wengert.config(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in self._NAMES) + ")"


config = Config()
