"""A GGUF file into a Hugging Face folder that transformers (and so llmcompressor and vLLM) load.

The real file is the packaged Qwen2.5 Coder 0.5B Instruct (scripts/assemble_qwen_gguf.py); the
test that converts it is slow (~70 s, 2.5 GB written) and skips, saying why, where the file is
absent. The refusals need no model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from flatscore.models.gguf_import import GGUFImportError, has_tool_template, import_gguf

QWEN_GGUF = Path(os.environ.get("FLATSCORE_QWEN_GGUF", "models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"


def test_a_missing_file_and_a_wrong_checksum_are_refused(tmp_path):
    with pytest.raises(GGUFImportError, match="not found"):
        import_gguf(tmp_path / "none.gguf", tmp_path / "out")
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"GGUF not really")
    with pytest.raises(GGUFImportError, match="sha256"):
        import_gguf(fake, tmp_path / "out", expected_sha256=QWEN_SHA256)
    assert not (tmp_path / "out").exists(), "nothing written before the checks pass"


def test_a_template_without_tools_cannot_drive_an_agent():
    assert has_tool_template("{% if tools %}{{ tools | tojson }}{% endif %}")
    assert not has_tool_template("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert not has_tool_template(None)


@pytest.mark.slow
@pytest.mark.skipif(not QWEN_GGUF.is_file(), reason=f"{QWEN_GGUF} absent: python scripts/assemble_qwen_gguf.py")
def test_the_packaged_qwen_becomes_a_folder_that_writes_a_hermes_tool_call(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    manifest = import_gguf(QWEN_GGUF, tmp_path / "qwen", expected_sha256=QWEN_SHA256)
    config = json.loads((tmp_path / "qwen" / "config.json").read_text())
    assert "quantization_config" not in config, "llmcompressor refuses a folder that names a quantization"
    assert manifest.base_weights_sha256 == QWEN_SHA256 and manifest.kind == "imported"
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "qwen")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "qwen", dtype=torch.float32)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "find_user_id_by_email",
                "description": "Find a user id by email.",
                "parameters": {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]},
            },
        }
    ]
    messages = [{"role": "user", "content": "My email is ana.lee@example.com. Look up my user id."}]
    ids = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, return_tensors="pt")
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    out = model.generate(ids, max_new_tokens=48, do_sample=False)
    text = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=False)
    assert "<tool_call>" in text and "find_user_id_by_email" in text, text
