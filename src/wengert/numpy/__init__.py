"""wengert.numpy: NumPy's names, signatures, broadcasting and dtype rules, differentiable.

On plain arrays every function here returns exactly what NumPy returns. On traced values it
records the operation on the tape. Names without a derivative rule are NumPy's own, re-exported:
given a traced value they raise an error that names the function.
"""
from numpy import *  # noqa: F401,F403 - constants, dtypes and the functions wengert does not wrap
from numpy import e, euler_gamma, inf, nan, newaxis, pi, random  # noqa: F401

from . import _functions, _compositions, _statistics
from ._functions import *  # noqa: F401,F403
from ._compositions import *  # noqa: F401,F403
from ._statistics import *  # noqa: F401,F403
import importlib as _importlib
# not `from . import linalg`: that finds numpy.linalg, which `from numpy import *` bound here
linalg = _importlib.import_module(f"{__name__}.linalg")
fft = _importlib.import_module(f"{__name__}.fft")
from ._methods import build_dispatch_tables, install

import numpy as _np
import sys as _sys

build_dispatch_tables(_functions, _np)
build_dispatch_tables(_compositions, _np)
build_dispatch_tables(_statistics, _np)
build_dispatch_tables(linalg, _np.linalg)
build_dispatch_tables(fft, _np.fft)
install(_sys.modules[__name__])
