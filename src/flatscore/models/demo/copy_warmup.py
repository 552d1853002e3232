"""Copy warm-up: repeated random token spans that the demo model learns to continue before it
sees a demonstration.

Why: nearly everything the demo agent must do right is a copy (an email or an order id from the
user's message into a call, a user id from a tool result into the next call), and a copy is done
by an *induction head* (attend to where the current token stood before and emit the token that
followed it). On the demonstrations alone the default model formed none in 1,600 steps: on
held-out retail tasks its first call named an email it had memorised ("raj.patel6636@example.com")
instead of the one in the user's message, and given the email's first token it still went on
with the memorised rest ("lena.patel6636@..."); its telecom successes were the faults that need
no copied id. A span of uniformly random tokens followed by the same span has nothing to learn
*but* the copy (no word statistics predict the repeat). Measured on the default size (2-core
Intel Xeon, AMX): with spans of 8-32 tokens the copy loss stays near chance (7.7 -> 5.3) for
1,100 steps, then drops within 200 steps (2.4 at 1,200, 0.1 at 1,300): the induction head's
phase change.
"""

from __future__ import annotations

import random

#: The label that the loss ignores (the same value as transformers' ``-100``).
IGNORE = -100


def copy_tokens(tokenizer) -> list[int]:
    """The ordinary vocabulary: every token id except the special and added (marker) tokens."""
    special = set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)
    return [i for i in range(len(tokenizer)) if i not in special]


def repeated_spans(tokens: list[int], n: int, span_len: int, rng: random.Random) -> list[tuple[list[int], list[int]]]:
    """``n`` examples ``span + span`` of random tokens, labelled on the repeat.

    The span is 8 to ``span_len`` tokens, drawn per example: with one fixed length the model
    learnt "copy the token N places back" in 300 steps (loss 0.002 at that length, 16.7 at four
    times it), which is no use in a dialogue; with varying lengths only the content-addressed copy
    works. (Random filler before and between the spans kept the loss at chance for 500 steps.)
    The repeat's first token is unlabelled: nothing before it says which token it is. Each later
    one is predictable only by finding where the current token stood in the first span.
    """
    if span_len < 8:
        raise ValueError(f"span_len: expected >= 8, got {span_len}")
    if not tokens:
        raise ValueError("no ordinary tokens to draw copy spans from")
    examples = []
    for _ in range(n):
        length = rng.randint(8, span_len)
        span = [rng.choice(tokens) for _ in range(length)]
        ids = span + span
        labels = [IGNORE] * (len(ids) - length + 1) + span[1:]
        examples.append((ids, labels))
    return examples


#: Strings that sit between a field's name and its value, in the user's words ("email is",
#: "zip code is") or in a call or tool result ('": "', '":"'). Those that are one token of the
#: demo tokenizer are the connectors of :func:`keyed_recalls`.
CONNECTOR_STRINGS = ("Ġ", "is", "code", "am", "my", "of", ":", ",", '":', '":"', '"', '{"', '","')

#: The longest keyed-recall example in tokens (pairs, gaps, values and filler are drawn within it).
RECALL_MAX_TOKENS = 96


def connector_tokens(tokenizer) -> list[int]:
    """The ids of the :data:`CONNECTOR_STRINGS` that are single tokens of ``tokenizer``."""
    vocab = tokenizer.get_vocab()
    return sorted({vocab[s] for s in CONNECTOR_STRINGS if s in vocab})


def keyed_recalls(
    tokens: list[int], connectors: list[int], n: int, rng: random.Random
) -> list[tuple[list[int], list[int]]]:
    """``n`` associative-recall examples: key-value pairs, then some keys again, each value labelled.

    Why: the copy of :func:`repeated_spans` continues a value once its first token is out (an
    induction head), but nothing in it teaches where a value *starts*: in a dialogue the call's
    first value token follows the field's name and call punctuation (``email": "``), while in
    the user's words it followed the same name and other words (``email is``). Models trained
    alike copied emails 18/18 or 0/21 depending on the run (2-core Intel, held-out retail).
    Here each pair is a random key token, 0-3 connector tokens, a value of 1-5 random tokens and
    0-6 random filler tokens; then 1-3 of the keys come back, in another order and with other
    connectors, and their values are labelled from the first token on. Only a lookup by key
    predicts that first token (2-4 pairs, so position does not), and only skipping connectors
    finds it.
    """
    if not tokens or not connectors:
        raise ValueError("keyed_recalls: needs ordinary tokens and connector tokens")
    plain = [t for t in tokens if t not in set(connectors)]
    examples = []
    for _ in range(n):
        n_pairs = rng.randint(2, 4)
        keys = rng.sample(plain, n_pairs)
        # a key occurs nowhere else in its example: the lookup has one answer
        others = [t for t in plain if t not in keys]
        values = [[rng.choice(others) for _ in range(rng.randint(1, 5))] for _ in keys]
        ids: list[int] = []
        for key, value in zip(keys, values):
            gap = [rng.choice(connectors) for _ in range(rng.randint(0, 3))]
            filler = [rng.choice(others) for _ in range(rng.randint(0, 6))]
            ids += [key, *gap, *value, *filler]
        labels = [IGNORE] * len(ids)
        for q in rng.sample(range(n_pairs), rng.randint(1, min(3, n_pairs))):
            gap = [rng.choice(connectors) for _ in range(rng.randint(0, 3))]
            ids += [keys[q], *gap]
            labels += [IGNORE] * (1 + len(gap))
            # the label at position i is the token at i (labelled_loss shifts): the value's tokens
            ids += values[q]
            labels += values[q]
        examples.append((ids[:RECALL_MAX_TOKENS], labels[:RECALL_MAX_TOKENS]))
    return examples
