"""spec/ must import without torch and Django: the service and `verify` run without them."""

import subprocess
import sys
import textwrap

from tests.helpers import REPO


def test_spec_imports_with_torch_and_django_blocked() -> None:
    code = textwrap.dedent("""
        import importlib, pkgutil, sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {"torch", "django", "rest_framework", "celery"}:
                    raise ImportError(f"blocked: {name}")
        sys.meta_path.insert(0, Block())
        import aiperf_runner.spec as spec
        for mod in pkgutil.iter_modules(spec.__path__):
            importlib.import_module(f"aiperf_runner.spec.{mod.name}")
        print("ok", len(list(pkgutil.iter_modules(spec.__path__))))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok")
