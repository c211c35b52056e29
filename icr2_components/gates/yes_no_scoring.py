"""The probability of "yes" for a yes/no prompt: from next-token logits, sequence log-probabilities, a server's
top log-probabilities, or a reply.

For a local causal LM the gate renders the chat template, opens the assistant turn with the answer prefix
("[", since the prompt asks for "[Yes]" or "[No]") and reads the next-token logits of "Yes" and "No": one
forward pass, no sampling. P(yes) is renormalised over the two answers. When the tokenizer has no single token
for an answer, the two full answers are scored as continuations (summed token log-probabilities) in one
batched forward pass instead.

Behind an OpenAI-compatible server only generated tokens come back, each with its ``top_logprobs`` (the most
likely tokens at that position). A chat API cannot open the assistant turn with the answer prefix, so
:func:`score_yes_no_top_logprobs` skips generated tokens that are only the prefix or whitespace and, at the first
answer position, sums the probability of the variants of each answer among the top tokens ("Yes", " yes",
"[Yes", "YES", ...): P(yes) renormalised over the two sums, and their total as the answer mass.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

NEXT_TOKEN = "next_token"
SEQUENCE_LOGPROB = "sequence_logprob"
TOP_LOGPROBS = "top_logprobs"


@dataclass(frozen=True)
class YesNoScore:
    """P(yes) renormalised over yes/no, how it was computed, and the yes+no share of the model's probability."""

    p_yes: float
    scoring: str
    answer_mass: float
    reused_prefix_tokens: int = 0


def continuation_ids(tokenizer, prompt_text: str, answer: str) -> list[int]:
    """Token ids ``answer`` adds after ``prompt_text``, tokenized in context when the prompt ids are a prefix."""
    prompt_ids = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
    full_ids = tokenizer(prompt_text + answer, add_special_tokens=False)["input_ids"]
    if full_ids[: len(prompt_ids)] == prompt_ids and len(full_ids) > len(prompt_ids):
        return list(full_ids[len(prompt_ids):])
    return list(tokenizer(answer, add_special_tokens=False)["input_ids"])


def single_token_answers(tokenizer, prompt_text: str, yes_answer: str, no_answer: str) -> tuple[int, int] | None:
    """``(yes_id, no_id)`` when each answer is exactly one (distinct) token after the prompt, else None."""
    yes_ids = continuation_ids(tokenizer, prompt_text, yes_answer)
    no_ids = continuation_ids(tokenizer, prompt_text, no_answer)
    if len(yes_ids) == 1 and len(no_ids) == 1 and yes_ids != no_ids:
        return yes_ids[0], no_ids[0]
    return None


def two_way_probability(yes_logprob: float, no_logprob: float) -> float:
    """P(yes) among {yes, no} from two log-probabilities (a numerically stable two-way softmax)."""
    top = max(yes_logprob, no_logprob)
    yes, no = math.exp(yes_logprob - top), math.exp(no_logprob - top)
    return yes / (yes + no)


def score_yes_no(model, tokenizer, prompt_text: str, yes_answer: str, no_answer: str, prefix_cache=None) -> YesNoScore:
    """P(yes) for ``prompt_text`` (already chat-rendered, ending with the answer prefix).

    With a :class:`~icr2_components.models.prefix_cache.PrefixKVCache` the single forward pass runs only the
    tokens after the prefix this prompt shares with the previous one.
    """
    import torch

    single = single_token_answers(tokenizer, prompt_text, yes_answer, no_answer)
    prompt_ids = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
    if not prompt_ids:
        raise ValueError("The gate prompt tokenized to nothing; check the chat template and the prompt.")
    device = model.device
    with torch.inference_mode():
        if single is not None:
            reused = 0
            if prefix_cache is not None:
                logits, reused = prefix_cache.next_token_logits(model, prompt_ids)
            else:
                logits = _last_position_logits(model, torch.tensor([prompt_ids], device=device))
            logprobs = torch.log_softmax(logits, dim=-1)
            yes_lp, no_lp = float(logprobs[single[0]]), float(logprobs[single[1]])
            return YesNoScore(
                two_way_probability(yes_lp, no_lp), NEXT_TOKEN, math.exp(yes_lp) + math.exp(no_lp), reused
            )
        yes_ids = continuation_ids(tokenizer, prompt_text, yes_answer)
        no_ids = continuation_ids(tokenizer, prompt_text, no_answer)
        if not yes_ids or not no_ids:
            raise ValueError(f"The answers {yes_answer!r}/{no_answer!r} tokenize to nothing; choose non-empty answers.")
        yes_lp, no_lp = _sequence_logprobs(model, prompt_ids, [yes_ids, no_ids], tokenizer.pad_token_id)
        return YesNoScore(two_way_probability(yes_lp, no_lp), SEQUENCE_LOGPROB, math.exp(yes_lp) + math.exp(no_lp))


def _last_position_logits(model, input_ids):
    """Next-token logits at the last position; the LM head runs on that position only where supported."""
    try:
        output = model(input_ids=input_ids, logits_to_keep=1)
    except TypeError:  # models without logits_to_keep
        output = model(input_ids=input_ids)
    return output.logits[0, -1].float()


def _sequence_logprobs(model, prompt_ids: list[int], answers: list[list[int]], pad_id: int | None) -> list[float]:
    """Summed log-probabilities of each answer after the prompt, all answers in one right-padded batch."""
    import torch

    pad_id = 0 if pad_id is None else pad_id
    rows = [prompt_ids + answer for answer in answers]
    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long, device=model.device)
    attention = torch.zeros((len(rows), width), dtype=torch.long, device=model.device)
    for index, row in enumerate(rows):
        input_ids[index, : len(row)] = torch.tensor(row, device=model.device)
        attention[index, : len(row)] = 1
    logprobs = torch.log_softmax(model(input_ids=input_ids, attention_mask=attention).logits.float(), dim=-1)
    totals = []
    start = len(prompt_ids)
    for index, answer in enumerate(answers):
        # Token t of the answer is predicted at position start + t - 1.
        positions = torch.arange(start - 1, start - 1 + len(answer), device=model.device)
        targets = torch.tensor(answer, device=model.device)
        totals.append(float(logprobs[index, positions, targets].sum()))
    return totals


_EDGE_PUNCTUATION = re.compile(r"^[\W_]+|[\W_]+$")
_FIRST_WORD = re.compile(r"[^\W_]+")


def answer_key(text: str) -> str:
    """What answer a token or answer text stands for: its first word, case-folded, without spaces or brackets
    ("[Yes" -> "yes", " NO]" -> "no", "Yes, retrieve]" -> "yes"); "" for a token that is only punctuation."""
    match = _FIRST_WORD.search(_EDGE_PUNCTUATION.sub("", text or ""))
    return match.group(0).casefold() if match else ""


def answer_position(content: list, answer_prefix: str) -> int | None:
    """Index of the first generated token that is not the answer prefix or whitespace (None if all are).

    ``content`` is the OpenAI ``logprobs.content`` list; tokens are skipped while together (whitespace removed)
    they spell a beginning of ``answer_prefix`` ("[" for the TA-ARE prompt), the way a local model's answer turn
    is opened with the prefix before its next token is read.
    """
    target = "".join((answer_prefix or "").split())
    spelled = ""
    for index, position in enumerate(content):
        token = position.get("token") if isinstance(position, dict) else None
        if not isinstance(token, str):
            return None
        piece = "".join(token.split())
        if not piece:
            continue
        if target and target.startswith(spelled + piece) and len(spelled + piece) <= len(target):
            spelled += piece
            continue
        return index
    return None


def score_yes_no_top_logprobs(logprobs: object, yes_answer: str, no_answer: str,
                              answer_prefix: str = "") -> YesNoScore | None:
    """P(yes) from a chat completion's log-probabilities, or None when they cannot give one.

    ``logprobs`` is the choice's ``logprobs`` object as Haystack's ``OpenAIChatGenerator`` keeps it in
    ``reply.meta["logprobs"]`` (``{"content": [{"token", "logprob", "top_logprobs": [{"token", "logprob"}]}]}``).
    At the first answer position (:func:`answer_position`) the probabilities of the top tokens standing for each
    answer (:func:`answer_key`: case, leading space and bracket variants) are summed; P(yes) is the yes sum over
    both. None when there are no log-probabilities, no answer position, or neither answer among the top tokens.
    """
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not content:
        return None
    yes_key, no_key = answer_key(yes_answer), answer_key(no_answer)
    if not yes_key or not no_key or yes_key == no_key:
        return None
    index = answer_position(content, answer_prefix)
    if index is None:
        return None
    candidates = content[index].get("top_logprobs") or []
    if not candidates:  # the server sent only the chosen token: one answer's probability, not both
        return None
    masses = {yes_key: 0.0, no_key: 0.0}
    for candidate in candidates:
        if not isinstance(candidate, dict) or not isinstance(candidate.get("token"), str):
            continue
        logprob = candidate.get("logprob")
        key = answer_key(candidate["token"])
        if key in masses and isinstance(logprob, (int, float)) and not math.isnan(logprob):
            masses[key] += math.exp(min(float(logprob), 0.0))
    yes_mass, no_mass = masses[yes_key], masses[no_key]
    if yes_mass + no_mass <= 0.0:
        return None
    return YesNoScore(yes_mass / (yes_mass + no_mass), TOP_LOGPROBS, min(yes_mass + no_mass, 1.0))


_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def parse_yes_no_reply(reply: str) -> bool | None:
    """True for a reply that says yes ("[Yes]", "Yes, ..."), False for no, None when it says neither.

    The first yes/no word wins, so "No, I don't need to retrieve; yes I know it" is a no.
    """
    match = _YES_NO.search(reply or "")
    if match is None:
        return None
    return match.group(1).lower() == "yes"
