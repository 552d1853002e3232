"""A GGUF model the conversion cannot use is refused in one line, by the command and before any
job: a missing file, a file other than the checksum names, a chat template that renders no tools.

Every file here is a tiny GGUF written with the ``gguf`` package (a header, no tensors): the
refusals need no model.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest

from flatscore.cli import main
from flatscore.config_checks import file_problems
from flatscore.gguf_header import CHAT_TEMPLATE_KEY, GGUFHeaderError, file_sha256, metadata_string

TOOLS_TEMPLATE = "{%- if tools %}{{ tools | tojson }}{%- endif %}{% for m in messages %}{{ m.content }}{% endfor %}"
PLAIN_TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"


def write_gguf(path: Path, chat_template: str | None) -> Path:
    """A GGUF file with a few keys (a vocabulary array among them) and no tensors."""
    writer = gguf.GGUFWriter(str(path), arch="qwen2")
    writer.add_name("tiny")
    writer.add_token_list(["a", "bb", "ccc"])
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_the_header_gives_the_chat_template_past_a_vocabulary(tmp_path):
    assert metadata_string(write_gguf(tmp_path / "t.gguf", TOOLS_TEMPLATE), CHAT_TEMPLATE_KEY) == TOOLS_TEMPLATE
    assert metadata_string(write_gguf(tmp_path / "n.gguf", None), CHAT_TEMPLATE_KEY) is None
    (tmp_path / "x.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(GGUFHeaderError, match="not a GGUF file"):
        metadata_string(tmp_path / "x.gguf", CHAT_TEMPLATE_KEY)


@pytest.mark.parametrize("why", ["missing", "sha256"])
def test_import_gguf_refuses_in_one_line_and_writes_nothing(tmp_path, capsys, why):
    """Exit 2, one line naming the file, and no output folder: the checks run before torch loads."""
    gguf_file = write_gguf(tmp_path / "m.gguf", TOOLS_TEMPLATE)
    if why == "missing":
        argv = ["--gguf", str(tmp_path / "absent.gguf")]
        expected = f"flatscore: error: GGUF file not found: {tmp_path / 'absent.gguf'}"
    else:
        argv = ["--gguf", str(gguf_file), "--sha256", "0" * 64]
        expected = f"flatscore: error: {gguf_file}: sha256 {file_sha256(gguf_file)} != expected {'0' * 64}"
    assert main(["import-gguf", *argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == expected
    assert not (tmp_path / "out").exists()


def _config(tmp_path: Path, **model: str) -> dict:
    return {
        "results": str(tmp_path / "results"),
        "domains": {"retail": {"source": "synthetic"}},
        "models": {"qwen": {"kind": "hf", **model}},
    }


def test_config_checks_name_the_gguf_key_of_each_problem(tmp_path):
    good = write_gguf(tmp_path / "good.gguf", TOOLS_TEMPLATE)
    assert list(file_problems(_config(tmp_path, gguf=str(good)))) == []
    assert list(file_problems(_config(tmp_path, gguf=str(good), gguf_sha256=file_sha256(good)))) == []

    missing = list(file_problems(_config(tmp_path, gguf=str(tmp_path / "absent.gguf"))))
    wrong = list(file_problems(_config(tmp_path, gguf=str(good), gguf_sha256="0" * 64)))
    plain = list(file_problems(_config(tmp_path, gguf=str(write_gguf(tmp_path / "plain.gguf", PLAIN_TEMPLATE)))))
    untemplated = list(file_problems(_config(tmp_path, gguf=str(write_gguf(tmp_path / "none.gguf", None)))))
    (tmp_path / "junk.gguf").write_bytes(b"junk")
    junk = list(file_problems(_config(tmp_path, gguf=str(tmp_path / "junk.gguf"))))
    for problems, words in [
        (missing, "absent.gguf is not a file"),
        (wrong, f"has sha256 {file_sha256(good)}, not gguf_sha256 {'0' * 64}"),
        (plain, "chat template that renders no tools"),
        (untemplated, "chat template that renders no tools"),
        (junk, "cannot be read as GGUF"),
    ]:
        assert len(problems) == 1 and "\n" not in problems[0], problems
        assert problems[0].startswith("config: models.qwen.gguf: ") and words in problems[0], problems
