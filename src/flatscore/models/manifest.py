"""Model manifests: what a model dir is and how it was made; `sha` gives it a stable identity."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

MANIFEST_NAME = "flatscore_manifest.json"

# Fields that vary from run to run without changing the model: left out of `sha`. ``base_path``
# is where the source folder or file lay: moving a study or cloning it anew must not change any
# cell's identity (the source's content is in base_manifest_sha / base_weights_sha256).
VOLATILE_FIELDS = frozenset({"seconds", "created_at", "loss_curve_seconds", "host", "base_path"})


def sha256_json(obj: Any) -> str:
    """sha256 of a canonical JSON rendering (sorted keys, compact separators)."""
    data = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def sha256_files(paths: list[Path]) -> str:
    """sha256 over the bytes of the given files, in sorted-name order."""
    h = hashlib.sha256()
    for p in sorted(Path(p) for p in paths):
        h.update(p.name.encode())
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def weights_sha256(model_dir: str | Path) -> str:
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {model_dir}")
    return sha256_files(files)


def dir_size_bytes(model_dir: str | Path, pattern: str = "*.safetensors") -> int:
    return sum(p.stat().st_size for p in Path(model_dir).glob(pattern))


class Manifest(BaseModel):
    """A model manifest. `kind` is "demo", "quantized" or "external"; other fields depend on it
    (extra fields are kept). See train.train_demo_model and quantize.quantize_model."""

    model_config = ConfigDict(extra="allow")

    kind: str
    weights_sha256: str | None = None
    seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @property
    def sha(self) -> str:
        """Stable hash of the manifest minus timing fields: the model's identity for cells."""
        return sha256_json({k: v for k, v in self.to_dict().items() if k not in VOLATILE_FIELDS})

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        if path.is_dir():
            path = path / MANIFEST_NAME
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Manifest":
        path = Path(path)
        if path.is_dir():
            path = path / MANIFEST_NAME
        return cls.model_validate(json.loads(path.read_text(encoding="utf-8")))

    @classmethod
    def find(cls, model_dir: str | Path) -> "Manifest | None":
        p = Path(model_dir) / MANIFEST_NAME
        return cls.load(p) if p.is_file() else None
