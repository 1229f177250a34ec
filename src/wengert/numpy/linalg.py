"""wengert.numpy.linalg: NumPy's linalg, differentiable."""
from numpy.linalg import *  # noqa: F401,F403
