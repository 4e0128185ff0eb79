"""The public names stay what docs/architecture.md ("Public API contract") says, whatever was imported first."""
import subprocess
import sys


def test_verify_stays_the_function_after_the_engine_imports_its_module():
    """`from specdiff.verify import ...` (engine/generate.py) used to rebind `specdiff.verify` to the
    submodule, so `sd.verify(...)` raised "'module' object is not callable"."""
    code = ("import specdiff as sd; sd.SpeculativeGenerator; import specdiff.verify; "
            "import importlib; assert callable(sd.verify), sd.verify; "
            "assert importlib.import_module('specdiff.verify').verify is sd.verify; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
