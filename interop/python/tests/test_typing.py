"""The package's annotations hold under ``mypy --strict`` (configured in
pyproject.toml), and the wheel ships them (py.typed)."""
import subprocess
import sys

from conftest import REPO


def test_mypy_strict_finds_no_issue():
    checked = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO / "interop/python", capture_output=True, text=True)
    assert checked.returncode == 0, f"mypy --strict (pip install mypy):\n{checked.stdout}{checked.stderr}"
    assert "Success: no issues found" in checked.stdout
