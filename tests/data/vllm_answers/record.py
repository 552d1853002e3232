"""Record what vLLM's own Hermes tool-call parsing answers for crafted model outputs.

Why: flatscore's channels for a server's tool-call parser (``server_missed_call``,
``server_bad_answer``) and its handling of the model's bad calls must be tested against what a
real vLLM returns, not against what we believe it returns. Starting a vLLM server costs minutes of
scarce CPU; the part that decides the answer's ``content`` / ``tool_calls`` / ``finish_reason`` is
the server's parser step and the message construction after it, which this script runs without
an engine: vLLM's ``ParserManager`` composes the ``hermes`` parser exactly as
``vllm serve --enable-auto-tool-choice --tool-call-parser hermes`` does, ``Parser.parse`` runs on
the crafted text (standing in for the engine's decoded output), and the message, choice and
response are built with vLLM's own classes following the ``tool_choice="auto"`` branch of
``OpenAIServingChat.chat_completion_full_generator``. What is not exercised: the engine (tokens,
sampling) and ``skip_special_tokens`` decoding; the crafted texts are what a decode would give.

Run with vLLM's environment (never the project's), offline::

    HF_HUB_OFFLINE=1 /root/.cache/flatscore/vllm-venv/bin/python tests/data/vllm_answers/record.py \
        --tokenizer <a model folder with a tokenizer, e.g. results/models/demo/full>

It rewrites ``<mode>.json`` beside itself, one per mode in :data:`MODES`; each holds the crafted
output, the vLLM version, the tokenizer used, the parser's log lines and the response body as
the server would send it (``response``). Tool-call ids are vLLM's random ones.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: The tools the recorded requests offer (a subset of retail's agent tools, as flatscore sends them).
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Calculate the result of a mathematical expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_all_product_types",
            "description": "List the name and product id of all product types.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]

CALL = '<tool_call>\n{"name": "calculate", "arguments": {"expression": "2 + 2"}}\n</tool_call>'

#: mode -> (what the model decoded, the engine's finish reason, why this case)
MODES: dict[str, tuple[str, str, str]] = {
    "well_formed": (CALL, "stop", "a well-formed Hermes call: returned as tool_calls"),
    "call_left_in_content": (
        '<tool_call>\n{"name": "list_all_product_types"}\n</tool_call>',
        "stop",
        "a zero-argument call without an 'arguments' key: well formed for flatscore's parser, "
        "but vLLM's hermes parser reads function_call['arguments'], fails and leaves it in content",
    ),
    "broken_json_arguments": (
        '<tool_call>\n{"name": "calculate", "arguments": {"expression": "2 + 2"}\n</tool_call>',
        "stop",
        "the arguments' closing brace lost: the call is not JSON; vLLM leaves the whole text in content",
    ),
    "broken_json_in_string_arguments": (
        '<tool_call>\n{"name": "calculate", "arguments": "{\\"expression\\": \\"2 + 2\\""}\n</tool_call>',
        "stop",
        "arguments double-encoded as a string whose object lost its closing brace: the outer JSON "
        "parses, so vLLM returns a tool_call whose arguments decode to a string, not an object",
    ),
    "unlisted_tool": (
        '<tool_call>\n{"name": "delete_all_orders", "arguments": {}}\n</tool_call>',
        "stop",
        "a call to a tool the request did not list: vLLM's hermes parser does not check names",
    ),
    "other_side_tool": (
        '<tool_call>\n{"name": "toggle_airplane_mode", "arguments": {}}\n</tool_call>',
        "stop",
        "a telecom user's phone action called by the agent: not listed, returned as tool_calls",
    ),
    "truncated_call": (
        '<tool_call>\n{"name": "calculate", "arguments": {"expre',
        "length",
        "max_tokens reached inside a call: vLLM leaves it in content; finish_reason says length",
    ),
    "plain_message": (
        "Sure, I can help with that. Could you give me your order id?",
        "stop",
        "a plain message: content only",
    ),
}


def _capture_logs() -> io.StringIO:
    """vLLM's logger writes the parser's traceback (``Error in extracting tool call``): keep it."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.getLogger("vllm").addHandler(handler)
    return buf


def record(tokenizer_path: str, out_dir: Path) -> list[Path]:
    import vllm
    from vllm.entrypoints.openai.chat_completion import serving as S
    from vllm.parser.parser_manager import ParserManager
    from vllm.tokenizers import get_tokenizer

    tokenizer = get_tokenizer(tokenizer_path)
    parser_cls = ParserManager.get_parser(tool_parser_name="hermes", enable_auto_tools=True, tokenizer=tokenizer)
    assert parser_cls is not None and parser_cls.tool_parser_cls is not None
    logs = _capture_logs()
    written = []
    for mode, (text, engine_finish, why) in MODES.items():
        request = S.ChatCompletionRequest(
            model="demo",
            messages=[{"role": "user", "content": "Hi"}],
            tools=TOOLS,
            tool_choice="auto",
            max_tokens=64,
        )
        parser = parser_cls(tokenizer, request.tools, chat_template_kwargs={}, model_config=None)
        logs.seek(0)
        logs.truncate()
        reasoning, content, tool_calls = parser.parse(text, request, enable_auto_tools=True)
        # OpenAIServingChat.chat_completion_full_generator, tools given and tool_choice "auto":
        auto_tools_called = tool_calls is not None and len(tool_calls) > 0
        if tool_calls:
            message = S.ChatMessage(
                role="assistant",
                reasoning=reasoning,
                content=content,
                tool_calls=[S.ToolCall(id=tc.id or S.make_tool_call_id(), function=tc) for tc in tool_calls],
            )
        else:
            message = S.ChatMessage(role="assistant", reasoning=reasoning, content=content)
        choice = S.ChatCompletionResponseChoice(
            index=0,
            message=message,
            logprobs=None,
            finish_reason="tool_calls" if auto_tools_called else engine_finish,
            stop_reason=None,
        )
        choice = S.maybe_filter_parallel_tool_calls(choice, request)
        response = S.ChatCompletionResponse(
            id=f"chatcmpl-recorded-{mode}",
            created=0,
            model="demo",
            choices=[choice],
            usage=S.UsageInfo(prompt_tokens=20, completion_tokens=len(tokenizer.encode(text)), total_tokens=0),
        )
        body = response.model_dump()  # what the API router sends: JSONResponse(content=result.model_dump())
        body["usage"]["total_tokens"] = body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
        fixture = {
            "mode": mode,
            "why": why,
            "model_output": text,
            "engine_finish_reason": engine_finish,
            "vllm_version": vllm.__version__,
            "tool_parser": f"hermes ({parser_cls.tool_parser_cls.__name__})",
            "tokenizer": str(tokenizer_path),
            "parser_log": [line for line in logs.getvalue().splitlines() if line.startswith(("ERROR", "WARNING"))],
            "response": body,
        }
        path = out_dir / f"{mode}.json"
        path.write_text(json.dumps(fixture, indent=2, ensure_ascii=False, default=str) + "\n")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", required=True, help="a model folder (or hub id, offline cache) with a tokenizer")
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args(argv)
    for path in record(args.tokenizer, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
