"""How far back a demo model's copy reaches: random spans repeated after a gap of random tokens.

    python benchmarks/demo_copy_reach.py MODEL_DIR [MODEL_DIR ...]

For each gap (0 to 512 tokens) it draws 40 spans of 16 random ordinary tokens, writes span, gap,
span, and counts the repeat's tokens 2..16 that the model predicts right, teacher-forced (the
first token of a repeat is not predictable). Why: the copy steps of training repeat a span at
once (8-32 tokens apart, ``copy_warmup.repeated_spans``), while in a retail dialogue a value stands
49-81 tokens (median 58) before the call that needs it, and a tool result's ids further. Whether a
run identifies customers followed this reach, not the lever tried (docs/demo-model.md). About 20 s
per model on 2 CPU cores, 1 thread.
"""

from __future__ import annotations

import random
import sys

GAPS = (0, 16, 32, 64, 128, 512)
SPAN = 16
SPANS_PER_GAP = 40


def copy_reach(model_dir: str, seed: int = 0) -> dict[int, float]:
    """{gap: share of the repeats' tokens 2..SPAN predicted right}."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from flatscore.models.demo.copy_warmup import copy_tokens

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    vocab = copy_tokens(tok)
    rng = random.Random(seed)
    reach = {}
    for gap in GAPS:
        right = 0
        for _ in range(SPANS_PER_GAP):
            span = [rng.choice(vocab) for _ in range(SPAN)]
            ids = span + [rng.choice(vocab) for _ in range(gap)] + span
            with torch.no_grad():
                predicted = model(torch.tensor([ids])).logits[0].argmax(-1).tolist()
            repeat = SPAN + gap  # the position of the repeat's first token predicts its second
            right += sum(predicted[repeat + k] == span[k + 1] for k in range(SPAN - 1))
        reach[gap] = right / (SPANS_PER_GAP * (SPAN - 1))
    return reach


def main(model_dirs: list[str]) -> int:
    import torch

    torch.set_num_threads(1)
    for model_dir in model_dirs:
        reach = copy_reach(model_dir)
        print(f"{model_dir}: " + " | ".join(f"gap {gap}: {share:.2f}" for gap, share in reach.items()), flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
