"""``with no_warnings(): ...`` fails the test if the block warns: vmap warns when it falls back to
a loop over the examples, so a rule that is missing or refuses its case shows up here."""
import contextlib
import warnings


@contextlib.contextmanager
def no_warnings():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    assert not caught, [str(w.message) for w in caught]
