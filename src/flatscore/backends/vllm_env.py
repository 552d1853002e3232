"""vLLM's CPU build in its own virtual environment: built once per machine, checked, reused.

vLLM can never share flatscore's environment (it pins other transformers and compressed-tensors
versions than llmcompressor), so on a CPU machine the server runs from a venv of its own, as it
runs from the inference container on a GPU cluster. The venv is built from
``envs/vllm-cpu.txt`` with the fixes this machine kind needs (see ``../shared/notes/STACK.md``):

* torch is pinned to the CPU build in the requirements file, so no CUDA package is pulled; the
  build fails, naming them, if any ``nvidia-*`` package got in anyway;
* torchvision, torchaudio and torchcodec are removed afterwards (they fail to import beside the
  CPU torch, ``operator torchvision::nms does not exist``, and vLLM imports them at start);
* the server is started as ``python -m vllm.entrypoints.openai.api_server`` (the distribution
  is called ``vllm-cpu``, so the ``vllm serve`` entry point cannot find its own metadata).

A marker file ``flatscore-env.json`` in the venv records the requirements' digest and the
versions; a build with the same requirements reuses the venv, so every study of a machine
shares one (about 3.5 GB).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from flatscore.atomic_write import write_json_atomic
from flatscore.backends.offline import OFFLINE_ENV

ENV_MARKER = "flatscore-env.json"
#: Packages that break vLLM's CPU start beside the CPU torch (removed after every install).
BROKEN_BESIDE_CPU_TORCH = ("torchvision", "torchaudio", "torchcodec")
#: The module the server is started from (``vllm serve`` cannot find the ``vllm-cpu`` metadata).
SERVER_MODULE = "vllm.entrypoints.openai.api_server"


class VLLMEnvError(RuntimeError):
    """The vLLM environment could not be built or does not work."""


def venv_python(venv: str | Path) -> Path:
    return Path(venv).expanduser() / "bin" / "python"


def requirements_digest(requirements: Path) -> str:
    return hashlib.sha256(requirements.read_bytes()).hexdigest()[:16]


def read_marker(venv: str | Path) -> dict[str, Any] | None:
    path = Path(venv).expanduser() / ENV_MARKER
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _run(command: list[str], what: str, log: Any) -> str:
    """Run one build step; its output goes to ``log`` and, on failure, into the error."""
    print(f"[vllm-env] {what}: {' '.join(command)}", file=log, flush=True)
    done = subprocess.run(command, capture_output=True, text=True)
    log.write(done.stdout[-20000:])
    log.write(done.stderr[-20000:])
    log.flush()
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise VLLMEnvError(f"{what} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def _installed(python: Path, log: Any) -> dict[str, str]:
    out = _run([str(python), "-m", "pip", "list", "--format", "json"], "list packages", log)
    return {p["name"].lower(): p["version"] for p in json.loads(out)}


def check_env(python: Path, log: Any = sys.stderr) -> dict[str, str]:
    """Import vLLM and torch in the venv; the versions, or VLLMEnvError saying what is wrong."""
    probe = (
        "import json, torch, vllm, transformers; "
        "print(json.dumps({'vllm': vllm.__version__, 'torch': torch.__version__, "
        "'transformers': transformers.__version__, 'cuda': torch.version.cuda}))"
    )
    out = _run([str(python), "-c", probe], "import vllm", log)
    versions = json.loads(out.strip().splitlines()[-1])
    if versions.get("cuda"):
        raise VLLMEnvError(f"torch in {python} is a CUDA build ({versions['torch']}); the CPU build was expected")
    return versions


def has_cpu_int4_kernel(venv: str | Path) -> bool:
    """Whether the venv's vLLM CPU build has its W4A16 (int4 weight) kernel on this CPU.

    Why: vllm-cpu ships one kernel library per x86 level and loads the one this CPU runs; the
    AVX2 library has no ``cpu_gemm_wna16`` (seen with vllm-cpu 0.32 on an AMD EPYC with AVX2 only:
    the server of an AWQ W4A16 model died at start with "no attribute 'cpu_gemm_wna16'"), while
    the AVX-512 ones serve it (``CPUWNA16LinearKernel``). Asks vLLM's own platform to load its
    kernels, as the server does, then looks the op up.
    """
    probe = (
        "import torch; from vllm.platforms import current_platform; current_platform.import_kernels(); "
        "print('int4-kernel', hasattr(torch.ops._C, 'cpu_gemm_wna16'))"
    )
    done = subprocess.run([str(venv_python(Path(venv).expanduser())), "-c", probe], capture_output=True, text=True)
    if done.returncode != 0:
        raise VLLMEnvError(f"probing vLLM's CPU kernels failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return "int4-kernel True" in done.stdout


def build_vllm_env(venv: str | Path, requirements: Path, log: Any = sys.stderr, force: bool = False) -> dict[str, Any]:
    """Build (or reuse) the venv at ``venv`` from ``requirements``; return its marker.

    Reused when its marker names the same requirements digest and vLLM still imports. The
    marker is written last, so an interrupted build is redone, never half-used.
    """
    venv = Path(venv).expanduser()
    requirements = Path(requirements)
    if not requirements.is_file():
        raise VLLMEnvError(f"requirements file not found: {requirements}")
    digest = requirements_digest(requirements)
    python = venv_python(venv)
    marker = read_marker(venv)
    if not force and marker and marker.get("requirements_sha256") == digest and python.exists():
        check_env(python, log)
        return marker
    t0 = time.perf_counter()
    (venv / ENV_MARKER).unlink(missing_ok=True)
    _run([sys.executable, "-m", "venv", str(venv)], "create the venv", log)
    _run([str(python), "-m", "pip", "install", "--upgrade", "pip"], "upgrade pip", log)
    _run([str(python), "-m", "pip", "install", "-r", str(requirements)], "install the requirements", log)
    installed = _installed(python, log)
    broken = [name for name in BROKEN_BESIDE_CPU_TORCH if name in installed]
    if broken:
        _run([str(python), "-m", "pip", "uninstall", "-y", *broken], "remove " + ", ".join(broken), log)
    cuda = sorted(name for name in installed if name.startswith("nvidia-"))
    if cuda:
        raise VLLMEnvError(f"CUDA packages were pulled into {venv}: {', '.join(cuda)}; pin torch to the CPU build")
    versions = check_env(python, log)
    marker = {
        "venv": str(venv),
        "python": str(python),
        "requirements": str(requirements),
        "requirements_sha256": digest,
        "versions": versions,
        "removed": broken,
        "build_seconds": round(time.perf_counter() - t0, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json_atomic(venv / ENV_MARKER, marker)
    return marker


def vllm_cpu_env(venv: str | Path, kv_cache_gib: int, cache_dir: str | Path | None = None) -> dict[str, str]:
    """Environment of a vLLM CPU server: its KV cache size, no hub access, no usage report."""
    env = {**OFFLINE_ENV, "VLLM_CPU_KVCACHE_SPACE": str(int(kv_cache_gib)), "VLLM_NO_USAGE_STATS": "1"}
    if cache_dir is not None:
        env["HF_HUB_CACHE"] = str(cache_dir)
    # the venv's own binaries first (vLLM starts helper processes by name)
    env["PATH"] = os.pathsep.join([str(venv_python(venv).parent), os.environ.get("PATH", "")])
    return env


__all__ = [
    "ENV_MARKER",
    "SERVER_MODULE",
    "VLLMEnvError",
    "build_vllm_env",
    "check_env",
    "has_cpu_int4_kernel",
    "read_marker",
    "venv_python",
    "vllm_cpu_env",
]
