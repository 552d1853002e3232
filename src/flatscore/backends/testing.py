"""Test helpers for backends: a tiny random chat model and a fault-injecting OpenAI server.

* :func:`build_tiny_model` writes a tiny random Llama with a byte-level BPE tokenizer whose
  chat template is ChatML + Hermes tool calls (tools listed compactly) and whose
  ``response_template`` lets ``transformers serve`` parse tool calls. It is independent of
  :mod:`flatscore.models.demo` so that backend tests do not depend on it.
* :data:`FAKE_SERVER` is a stdlib (``http.server``) OpenAI chat-completions server that
  echoes the last message, answers with a tool call when given tools, logs every request it
  receives and answers (``recv <id>`` / ``done <id>``, by ``X-Request-Id``), and can fail on
  purpose (``--mode 500|hang|badjson|nohealth|flaky500|400onfail``, ``--ignore-term``,
  ``--term-log``, ``--child-pid-file``). Tests run it as a real process under ManagedServer.
"""

from __future__ import annotations

import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n<tools>\n{% for tool in tools %}{{ tool.function.name }}({{ tool.function.parameters.properties | list | join(', ') }})\n{% endfor %}"
    '</tools>\nCall a tool as <tool_call>{"name": ..., "arguments": {...}}</tool_call><|im_end|>\n'
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'system' %}"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n{% if m.content %}{{ m.content }}{% endif %}"
    '{% for tc in m.tool_calls or [] %}\n<tool_call>\n{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments }}}\n</tool_call>{% endfor %}<|im_end|>\n'
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# What `transformers serve` needs to parse tool calls of a non-Qwen model (see backends/serve.py).
from .serve import HERMES_RESPONSE_TEMPLATE as RESPONSE_TEMPLATE  # noqa: E402

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]

CORPUS = [
    "Hello, how can I help you today? I need to cancel my order #W123.",
    '{"name": "get_order_details", "arguments": {"order_id": "#W123"}}',
    "Please do this on your phone: toggle_airplane_mode()",
    "The user id is sara_doe_496. Thanks, goodbye! ###STOP###",
    "system user assistant tool tools function arguments name parameters",
    "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ .,;:!?()[]{}<>\"'#_-+=/\\",
]


def build_tiny_model(out_dir: Path, *, seed: int = 0, vocab_size: int = 384, hidden: int = 64, layers: int = 2) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        additional_special_tokens=["<|im_start|>", "<tool_call>", "</tool_call>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.response_template = RESPONSE_TEMPLATE
    fast.save_pretrained(out_dir)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        # a wider init makes logits peaked, so greedy choices are not decided by rounding noise
        initializer_range=0.2,
        eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=fast.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(out_dir)
    return out_dir


_BUILT: dict[tuple, Path] = {}


def tiny_model_cached(root: Path, **kwargs) -> Path:
    """:func:`build_tiny_model` once per process and arguments (test sessions share it)."""
    key = tuple(sorted(kwargs.items()))
    path = _BUILT.get(key)
    if path is None or not (path / "config.json").exists():
        path = build_tiny_model(Path(root) / f"tiny_{abs(hash(key))}", **kwargs)
        _BUILT[key] = path
    return path


FAKE_SERVER = r"""
import argparse, json, os, signal, subprocess, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--mode", default="ok")  # ok | 500 | hang | badjson | nohealth | flaky500 | 400onfail
ap.add_argument("--log", required=True)
ap.add_argument("--delay", type=float, default=0.0)
ap.add_argument("--child-pid-file")
ap.add_argument("--ignore-term", action="store_true")
ap.add_argument("--term-log")  # log each SIGTERM's sender to this file, exit 1 s after the first
a = ap.parse_args()
if a.ignore_term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if a.term_log:
    # blocked in every thread (they inherit the mask) and taken by one, which learns the sender
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    def take_terms():
        while True:
            info = signal.sigwaitinfo({signal.SIGTERM})
            with open(a.term_log, "a") as f:
                f.write(f"term from {info.si_pid}\n")
            threading.Timer(1.0, lambda: os._exit(0)).start()
    threading.Thread(target=take_terms, daemon=True).start()
if a.child_pid_file:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open(a.child_pid_file, "w").write(str(child.pid))
lock = threading.Lock()
hits = {"n": 0}
log_file = open(a.log, "a", buffering=1)  # one open file, a flushed line per event (tests read it live)

def log(line):
    with lock:
        log_file.write(line + "\n")

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body went out as two small writes: with Nagle on, the second waited for the
    # client's delayed ACK (~40 ms), so a "50 ms" server answered in ~90 ms. One write, no Nagle.
    disable_nagle_algorithm = True
    def log_message(self, *args):
        pass
    def _send(self, code, payload, ctype="application/json"):
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        head = (f"HTTP/1.1 {code} {self.responses.get(code, ('',))[0]}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(data)}\r\n\r\n").encode()
        self.log_request(code)
        self.wfile.write(head + data)
    def do_GET(self):
        if self.path == "/health" and a.mode != "nohealth":
            return self._send(200, {"status": "ok"})
        if self.path == "/v1/models":
            return self._send(200, {"object": "list", "data": [{"id": "fake"}]})
        self._send(404, {"error": "not found"})
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        rid = self.headers.get("X-Request-Id", "?")
        auth = self.headers.get("Authorization", "")
        log("recv " + rid + " auth=" + ("yes" if auth else "no"))
        with lock:
            hits["n"] += 1
            n = hits["n"]
        if a.mode == "500" or (a.mode == "flaky500" and n % 2 == 1):
            return self._send(500, {"error": "boom"})
        if a.mode == "hang":
            time.sleep(3600)
        if a.mode == "badjson":
            return self._send(200, b"{not json", "application/json")
        time.sleep(a.delay)
        last = body["messages"][-1]["content"]
        if a.mode == "400onfail" and "FAIL" in last:  # one bad request among good ones
            return self._send(400, {"error": "bad request: " + last})
        message = {"role": "assistant", "content": "echo:" + last}
        if body.get("tools"):
            name = body["tools"][0]["function"]["name"]
            message["tool_calls"] = [{"id": "srv0", "type": "function", "function": {"name": name, "arguments": json.dumps({"seed": body.get("seed")})}}]
        payload = {"id": rid, "object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13, "prompt_tokens_details": {"cached_tokens": 4}}}
        log("done " + rid)
        self._send(200, payload)

# the default listen backlog (5) resets connections when 32 clients connect at once
ThreadingHTTPServer.request_queue_size = 256
srv = ThreadingHTTPServer(("127.0.0.1", a.port), H)
srv.daemon_threads = True
print("listening", a.port, flush=True)
srv.serve_forever()
"""


def write_fake_server(path: Path) -> Path:
    """Write the fault-injecting OpenAI-compatible server script to ``path``."""
    path = Path(path)
    path.write_text(FAKE_SERVER)
    return path


def fake_server_command(script: Path, log: Path, mode: str = "ok", *extra: str) -> list[str]:
    """Command line for :data:`FAKE_SERVER` (``{port}`` is filled in by ManagedServer)."""
    return [sys.executable, str(script), "--port", "{port}", "--mode", mode, "--log", str(log), *extra]


def process_alive(pid: int) -> bool:
    """True if ``pid`` runs (a zombie counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in state.splitlines():
        if line.startswith("State:"):
            return "Z" not in line.split()[1]
    return True


__all__ = [
    "FAKE_SERVER",
    "build_tiny_model",
    "fake_server_command",
    "process_alive",
    "tiny_model_cached",
    "write_fake_server",
]


#: One tool in OpenAI form, for backend tests and benchmarks that need a request with tools.
SAMPLE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_order_details",
            "description": "Look up an order",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
        },
    }
]
