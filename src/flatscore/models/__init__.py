"""Models: demo tool-calling model, AWQ quantization, manifests, loading."""

from .manifest import MANIFEST_NAME, Manifest

__all__ = ["MANIFEST_NAME", "Manifest"]
