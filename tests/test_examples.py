"""The examples the README points to run as written."""
import pathlib
import runpy

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def test_quickstart_runs(capsys):
    runpy.run_path(str(EXAMPLES / "quickstart.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "check_grads(order=2): ok" in out
    assert "per-example gradient of w: (8, 3, 1)" in out
