"""ragas' judge metrics driven by a judge model from any backend file (``backends/*.yaml``).

Three metrics, each ragas' own class and prompts (ragas 0.4, ``ragas.metrics``), each scored in [0, 1]:

- ``groundedness``: ``ResponseGroundedness`` (``nv_response_groundedness``): is the answer supported by the
  passages shown? Two rating prompts (0, 1 or 2), averaged by ragas.
- ``context_relevance``: ``ContextRelevance`` (``nv_context_relevance``): do the passages shown hold what the
  question needs? Two rating prompts, averaged.
- ``answer_relevance``: ``ResponseRelevancy`` (``answer_relevancy``): the judge writes the question the answer
  answers (JSON through ragas' ``PydanticPrompt``, with its format-fixing retry), and the score is the cosine of its
  embedding with the question's (times 0 for a noncommittal answer). Embeddings: the bundled all-MiniLM-L6-v2
  (``[local]`` extra), never a download.

Why these: ragas' ``Faithfulness`` and ``LLMContextPrecisionWithoutReference`` ask the judge for JSON lists of
statements and verdicts, which a small judge (the bundled SmolLM2-135M) rarely writes; the NVIDIA-style metrics
ask for one digit, which any judge can give, and ``ResponseRelevancy`` is ragas' one answer-to-question metric
that needs no reference.

The judge is the chat reader the backend puts in a pipeline's reader role (a ``ServedChatReader`` for a served
backend, a ``LocalChatReader`` for a local one), wrapped as a ragas LLM (:class:`ChatGeneratorRagasLLM`), decoding
greedily: a judgement is reproducible and cached. ragas re-asks a rating prompt whose reply holds no digit; a greedy
judge would repeat itself, so each prompt is asked once. ragas turns a failed request into NaN; here the request's
error is re-raised instead (the caller retries it and records it as failed, never as a score), and a NaN with no
failed request is an **unparsable** reply: counted, never a value.

ragas reports usage analytics unless ``RAGAS_DO_NOT_TRACK=true`` (ragas' own switch): the ``icr2`` command, the
benches and the tests set it (``icr2_components._environment``); a library user chooses.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import math
import typing as t
from dataclasses import dataclass, field

from icr2_components.backends import Backend
from icr2_components.backends.pipelines import component_class, resolve_backend

#: the judge metrics, in report order: name -> (ragas class, the record inputs it needs, what it measures)
JUDGE_METRICS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "groundedness": ("ResponseGroundedness", ("answer", "passages"),
                     "the answer is supported by the passages shown (ragas nv_response_groundedness)"),
    "answer_relevance": ("ResponseRelevancy", ("question", "answer"),
                         "the answer addresses the question (ragas answer_relevancy, all-MiniLM-L6-v2 embeddings)"),
    "context_relevance": ("ContextRelevance", ("question", "passages"),
                          "the passages shown hold what the question needs (ragas nv_context_relevance)"),
}
#: tokens a judge reply may take, per metric: a rating is one digit (ragas looks in the first 8 tokens); the
#: generated question of answer relevance is a short JSON object
JUDGE_MAX_NEW_TOKENS = {"groundedness": 8, "context_relevance": 8, "answer_relevance": 40}
EMBEDDING_MODEL = "all-minilm-l6-v2"
JUDGE_VERSION = 1
"""Bumped when what a judgement means changes (prompts' settings here, parsing); part of the judge hash."""


class JudgeRequestError(RuntimeError):
    """A judge request failed (after the client's own retries); the judgement is not made, never scored."""


def parse_metrics(value: str | t.Sequence[str] | None) -> list[str]:
    """The judge metrics asked for (comma-separated or a list; None: all), checked against ``JUDGE_METRICS``."""
    if value is None:
        return list(JUDGE_METRICS)
    items = [v.strip() for v in (value.split(",") if isinstance(value, str) else value) if v.strip()]
    unknown = [v for v in items if v not in JUDGE_METRICS]
    if not items or unknown:
        raise ValueError(f"judge metrics are a comma-separated subset of {list(JUDGE_METRICS)}; got {value!r}.")
    return list(dict.fromkeys(items))


def judge_reader(backend: Backend, max_new_tokens: int) -> t.Any:
    """The chat reader ``backend`` puts in a reader's role (its kind decides: a served kind gives a
    ``ServedChatReader``, a local kind its model in a ``LocalChatReader``), greedy, ``max_new_tokens`` a reply."""
    from icr2_components.readers import LocalChatReader

    model = backend.kind.local_model() or "smollm2-135m-instruct"
    entry = {"model": model, "max_new_tokens": max_new_tokens}
    variant = backend.follow(LocalChatReader, entry)
    if variant is None:
        return LocalChatReader(**entry)
    return component_class(variant["type"])(**variant["init_parameters"])


def judge_hash(backend: Backend) -> str:
    """What makes two judgements comparable: the model that judges and where it runs (the kind's reader label),
    ragas' version, the reply budgets and ``JUDGE_VERSION``."""
    from importlib.metadata import version

    material = {"judge": backend.kind.reader_label(backend.kind.local_model()), "ragas": version("ragas"),
                "max_new_tokens": JUDGE_MAX_NEW_TOKENS, "embeddings": EMBEDDING_MODEL, "version": JUDGE_VERSION}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def _ragas_llm_class():
    from langchain_core.outputs import Generation, LLMResult
    from ragas.llms import BaseRagasLLM
    from ragas.run_config import RunConfig

    class ChatGeneratorRagasLLM(BaseRagasLLM):
        """A Haystack chat generator (``run``/``run_async`` taking ``messages``) as a ragas LLM. Keeps every reply
        (``replies``) and the first request error (``error``), which ragas' metrics would otherwise swallow."""

        def __init__(self, generator: t.Any, max_new_tokens: int) -> None:
            super().__init__()
            self.generator = generator
            self.max_new_tokens = max_new_tokens
            self.replies: list[str] = []
            self.error: BaseException | None = None
            # one try here: a failed request is retried by the caller's one retry policy (concurrency.ordered_calls)
            self.set_run_config(RunConfig(max_retries=1))

        def _messages(self, prompt: t.Any) -> list:
            from haystack.dataclasses import ChatMessage

            return [ChatMessage.from_user(prompt.to_string())]

        def _result(self, texts: list[str]) -> LLMResult:
            self.replies += texts
            return LLMResult(generations=[[Generation(text=text) for text in texts]])

        def is_finished(self, response: LLMResult) -> bool:
            return True  # a cut reply is parsed (or counted unparsable) like any other

        def generate_text(self, prompt, n=1, temperature=0.01, stop=None, callbacks=None) -> LLMResult:
            texts = []
            for _ in range(n):
                try:
                    result = self.generator.run(messages=self._messages(prompt), max_new_tokens=self.max_new_tokens)
                except Exception as error:  # kept for the caller, then re-raised
                    self.error = self.error or error
                    raise
                texts.append(result["replies"][0].text or "")
            return self._result(texts)

        async def agenerate_text(self, prompt, n=1, temperature=0.01, stop=None, callbacks=None) -> LLMResult:
            run_async = getattr(self.generator, "run_async", None)
            texts = []
            for _ in range(n):
                try:
                    if run_async is not None and inspect.iscoroutinefunction(run_async):
                        result = await run_async(messages=self._messages(prompt), max_new_tokens=self.max_new_tokens)
                    else:
                        result = await asyncio.to_thread(self.generator.run, messages=self._messages(prompt),
                                                         max_new_tokens=self.max_new_tokens)
                except Exception as error:  # kept for the caller, then re-raised
                    self.error = self.error or error
                    raise
                texts.append(result["replies"][0].text or "")
            return self._result(texts)

    return ChatGeneratorRagasLLM


def _ragas_embeddings(model: str = EMBEDDING_MODEL):
    """The bundled sentence encoder as ragas embeddings (the process-wide model cache's copy)."""
    from ragas.embeddings import BaseRagasEmbeddings

    from icr2_components.models.sentence_backends import TorchEncoder

    class EncoderEmbeddings(BaseRagasEmbeddings):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = TorchEncoder(model)

        def embed_query(self, text: str) -> list[float]:
            return self.encoder.encode([text])[0].tolist()

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return self.encoder.encode(texts).tolist()

        async def aembed_query(self, text: str) -> list[float]:
            return self.embed_query(text)

        async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
            return self.embed_documents(texts)

    return EncoderEmbeddings()


def average_ratings(first: float, second: float) -> float:
    """The mean of the two rating prompts' scores that parsed (NaN when neither did). ragas' own
    ``average_scores`` means this, but takes ``max(first, second)`` when one is NaN, and Python's ``max`` returns
    a NaN that comes first: a parsed second rating was lost when the first reply held no digit."""
    parsed = [v for v in (first, second) if v == v]
    return sum(parsed) / len(parsed) if parsed else float("nan")


def _one_fix(prompt: t.Any) -> t.Any:
    """ragas' own prompt (same instruction, examples and parsing), with one format-fixing retry."""

    class OneFormatFix(type(prompt)):
        async def generate_multiple(self, *args, **kwargs):
            kwargs["retries_left"] = 1
            return await super().generate_multiple(*args, **kwargs)

    return OneFormatFix()


@dataclass
class Judgement:
    """One metric's verdict on one answer: ``value`` in [0, 1], or None with ``unparsable`` True (the judge's
    replies, kept in ``replies``, held no score ragas could read)."""

    value: float | None
    unparsable: bool
    replies: list[str] = field(default_factory=list)


class RagasJudge:
    """The judge metrics of one backend. ``judge(metric, question, answer, passages)`` asks the judge (an ``async``
    call: several run at once on a served backend) and returns a :class:`Judgement`.

    :param backend: A ``Backend``, a shipped backend name (``llama_cpp_server``) or a backend file.
    :raises MissingExtraError: ragas (the ``judge`` extra) is not installed, naming the extra.
    """

    def __init__(self, backend: Backend | str) -> None:
        from icr2_components.extras import require_extra

        require_extra("judge", "the judge (icr2 compare --judge)")
        resolved = resolve_backend(backend)
        if resolved is None:
            raise ValueError("Name a judge backend: a shipped backend name (e.g. llama_cpp_server) or a backend file.")
        self.backend = resolved
        self.hash = judge_hash(resolved)
        self._readers = {m: judge_reader(resolved, n) for m, n in JUDGE_MAX_NEW_TOKENS.items()}
        self._embeddings = None
        self._llm_class = _ragas_llm_class()

    @property
    def concurrency(self) -> int:
        return self.backend.concurrency

    def describe(self) -> str:
        return self.backend.describe()

    def warm_up(self) -> None:
        """Load the judge's readers (a local model, a served model's client) before the first question."""
        for reader in self._readers.values():
            if hasattr(reader, "warm_up"):
                reader.warm_up()

    def _metric(self, name: str, llm: t.Any) -> t.Any:
        import warnings

        with warnings.catch_warnings():
            # ragas 0.4 marks these classes deprecated for ragas.metrics.collections, whose metrics take another LLM
            # interface; the judge keeps the classes (and prompts) its tests and judge hash were made with
            warnings.simplefilter("ignore", DeprecationWarning)
            from ragas.metrics import ContextRelevance, ResponseGroundedness, ResponseRelevancy

        if name == "answer_relevance":
            if self._embeddings is None:
                self._embeddings = _ragas_embeddings()
            # greedy: more generated questions would be copies of the first; one format fix (ragas' default is
            # three, each a further request, which a judge that cannot write the JSON fails alike)
            return ResponseRelevancy(llm=llm, embeddings=self._embeddings, strictness=1,
                                     question_generation=_one_fix(ResponseRelevancy().question_generation))
        metric = {"groundedness": ResponseGroundedness, "context_relevance": ContextRelevance}[name](llm=llm)
        metric.retry = 1  # greedy: a second ask repeats the first reply
        metric.average_scores = average_ratings
        return metric

    async def judge(self, metric: str, question: str, answer: str, passages: list[str] | None) -> Judgement:
        """One judgement; raises :class:`JudgeRequestError` (the request's error as its cause) when a request
        failed, so that it is retried and recorded as failed, never scored."""
        from ragas.dataset_schema import SingleTurnSample
        from ragas.exceptions import RagasOutputParserException

        llm = self._llm_class(self._readers[metric], JUDGE_MAX_NEW_TOKENS[metric])
        scorer = self._metric(metric, llm)
        sample = SingleTurnSample(user_input=question, response=answer, retrieved_contexts=list(passages or []))
        try:
            value = await scorer.single_turn_ascore(sample)
        except RagasOutputParserException:
            value = None
        except Exception:
            if llm.error is not None:
                raise JudgeRequestError(f"judge request failed: {llm.error}") from llm.error
            raise
        if llm.error is not None:  # ragas' metrics turn a failed request into NaN
            raise JudgeRequestError(f"judge request failed: {llm.error}") from llm.error
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return Judgement(None, True, llm.replies)
        return Judgement(float(value), False, llm.replies)
