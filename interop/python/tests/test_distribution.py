"""The package as users get it: `python -m build` makes a wheel and an sdist,
the wheel installs into a fresh virtual environment, and a frame crosses
between two processes running that installed copy."""
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "interop/python"


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(PACKAGE)], capture_output=True, text=True)
    assert built.returncode == 0, f"python -m build failed (pip install build):\n{built.stdout}\n{built.stderr}"
    return out


def test_the_sdist_and_the_wheel_carry_the_code_the_readme_and_the_license(dist):
    sdist = next(dist.glob("gpuring-*.tar.gz"))
    wheel = next(dist.glob("gpuring-*-py3-none-any.whl"))
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    assert {"LICENSE", "README.md", "pyproject.toml", "src/gpuring/__init__.py", "src/gpuring/producer.py"} <= names
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "gpuring/consumer.py" in names
    assert "gpuring/py.typed" in names, "type hints are shipped (PEP 561)"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: Apache-2.0" in metadata


def test_the_wheel_installed_in_a_fresh_venv_carries_a_frame_between_processes(dist, tmp_path, ring_name):
    venv = tmp_path / "venv"
    # pyarrow comes from this interpreter (no network needed); gpuring only from the wheel.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = str(venv / "bin/python")
    wheel = next(dist.glob("gpuring-*-py3-none-any.whl"))
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", "--disable-pip-version-check", str(wheel)], check=True)
    where = subprocess.run([python, "-c", "import gpuring; print(gpuring.__file__)"], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert where.stdout.startswith(str(venv)), f"imported {where.stdout}, not the wheel's copy"
    consumer = subprocess.Popen([python, "-c", (
        "import gpuring\n"
        f"gpuring.Ring.wait_for({ring_name!r}, timeout=30)\n"
        f"with gpuring.Consumer.open({ring_name!r}) as c, c.next(timeout=30) as f:\n"
        "    print(f.to_arrow().to_pydict())\n")], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    producer = subprocess.run([python, "-c", (
        "import gpuring, pyarrow as pa\n"
        f"gpuring.Ring.create({ring_name!r}, slots=4, exist_ok=True).close()\n"
        f"with gpuring.Producer.open({ring_name!r}) as p:\n"
        "    p.publish(pa.table({'x': [1, 2, 3], 's': ['a', None, 'c']}))\n"
        "    p.drain(timeout=30)\n")], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert producer.returncode == 0, producer.stderr
    out, err = consumer.communicate(timeout=60)
    assert consumer.returncode == 0, err
    assert out.strip() == "{'x': [1, 2, 3], 's': ['a', None, 'c']}"
