"""Bad inputs to the library's components, called directly in one process as a Haystack user composes them.

Each case builds a component (or calls its ``run``) with one bad value: a run-time parameter out of range or of
the wrong type, empty or ``None`` contents, an oversized prompt, an empty document list, a bad name or file. A
case either expects an error, and names the words a clear error's message must hold (the parameter, the value
given), or checks the result it returns. The heavy models are shared: the tiny random Mistral for the
decoding-rule readers, SmolLM2 only for the RAP filter (its shipped heads are SmolLM2's), the llama.cpp server for
the gate and the served reader.
"""

from __future__ import annotations

import functools
import json
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bad_input_cases.common import LLAMA_URL, REPO
from icr2_components.testing import FixedAnswerServer

# where a clear error may be raised from: the library's own checks, or Haystack's
OWN_CODE = (str(REPO / "icr2_components"), "/haystack/", "/haystack_integrations/")


@dataclass
class Call:
    """One bad input to a component: ``call`` does it; ``says`` are the words a clear error must hold; ``right``
    checks a returned result (None: an error was due)."""

    what: str
    component: str
    call: Callable[[], Any]
    says: tuple[str, ...] = ()
    right: Callable[[Any], tuple[bool, str]] | None = None
    setup: bool = False
    timeout_s: float = 300  # a call not returned by then is a hang
    # run after the call whatever its outcome (unblock a hung call: e.g. open a FIFO's other end)
    cleanup: Callable[[], None] | None = None
    # of a returned result: what must still be there (rows of a table); failing it is data loss
    kept: Callable[[Any], tuple[bool, str]] | None = None


class _Hung(Exception):
    """The call did not return within its time limit."""


def _within(call: Callable[[], Any], seconds: float) -> Any:
    """``call()`` in a daemon thread, its result or its exception; :class:`_Hung` when it has not returned in
    ``seconds`` (the thread is left behind: a hung call cannot be stopped from outside)."""
    import threading

    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = call()
        except BaseException as error:  # handed to the caller as it is
            box["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise _Hung(f"no return within {seconds:.0f} s")
    if "error" in box:
        raise box["error"]
    return box.get("result")


def raised_where(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    return frames[-1].filename if frames else "?"


def classify_call(case: Call) -> dict[str, Any]:
    """Run ``case`` and classify what it shows (see ``common``'s classes)."""
    start = time.perf_counter()
    try:
        try:
            result = _within(case.call, case.timeout_s)
        finally:
            if case.cleanup is not None:
                case.cleanup()
    except _Hung as hung:
        return {"class": "hang", "observed": str(hung), "outcome": "(no return)",
                "seconds": time.perf_counter() - start}
    except Exception as error:  # every exception is an outcome to classify
        seconds = time.perf_counter() - start
        message = str(error).strip()
        where = raised_where(error)
        shown = f"{type(error).__name__}: {message}"
        own = any(part in where for part in OWN_CODE)
        specific = isinstance(error, (ValueError, TypeError)) or type(error).__module__.startswith(
            "icr2_components") or (isinstance(error, OSError) and not message.startswith("[Errno"))
        missing = [w for w in case.says if w.lower() not in message.lower()]
        if not specific:
            kind, observed = "raw crash", f"{type(error).__name__} is not a specific error"
        elif not own:
            kind, observed = "raw crash", f"raised inside {where.rsplit('site-packages/', 1)[-1]}"
        elif "\n" in message:
            kind, observed = "raw crash", "a message of several lines"
        elif not case.says:
            kind, observed = "raw crash", "the case names no words a clear error must hold"
        elif missing:
            kind, observed = "raw crash", f"message lacks {missing}"
        elif case.right is not None and not case.says:
            kind, observed = "silent wrong result", "an error where a result was due"
        else:
            kind, observed = "clear error", ""
        return {"class": kind, "observed": observed, "outcome": shown, "seconds": seconds}
    seconds = time.perf_counter() - start
    if case.kept is not None:
        try:
            whole, seen = case.kept(result)
        except Exception as error:
            whole, seen = False, f"result unreadable ({type(error).__name__}: {error})"
        if not whole:
            return {"class": "data loss", "observed": seen, "outcome": _short(result), "seconds": seconds}
    if case.right is None:
        return {"class": "silent wrong result", "observed": "returned where an error was due",
                "outcome": _short(result), "seconds": seconds}
    try:
        ok, observed = case.right(result)
    except Exception as error:
        ok, observed = False, f"result unreadable ({type(error).__name__}: {error})"
    return {"class": "right result" if ok else "silent wrong result", "observed": observed,
            "outcome": _short(result), "seconds": seconds}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 300 else text[:297] + "..."


# -- shared fixtures ------------------------------------------------------------------------------------------


def _documents(n: int = 6):
    from haystack import Document

    return [Document(id=f"d{i}", content=f"Passage {i} about topic {i}: " + " ".join(f"w{i}x{j}" for j in range(40)),
                     meta={"title": f"Title {i}"}, score=1.0 - i / 10) for i in range(n)]


def _ids(result: dict, key: str = "documents") -> list[str]:
    return [d.id for d in result[key]]


def returns_ids(expected: list[str], key: str = "documents") -> Callable[[Any], tuple[bool, str]]:
    def check(result: Any) -> tuple[bool, str]:
        got = _ids(result, key)
        return got == expected, f"returned {got} (expected {expected})"

    return check


def returns_empty(key: str) -> Callable[[Any], tuple[bool, str]]:
    def check(result: Any) -> tuple[bool, str]:
        value = result[key]
        return len(value) == 0, f"{key}: {len(value)} items (expected 0)"

    return check


def prompt_holds(*parts: str, absent: tuple[str, ...] = (), key: str = "prompt") -> Callable[[Any], tuple[bool, str]]:
    def check(result: Any) -> tuple[bool, str]:
        value = result[key]
        text = value if isinstance(value, str) else "\n".join(
            m.text or "" for m in (value if isinstance(value, list) else [value]))
        missing = [p for p in parts if p not in text]
        found = [p for p in absent if p in text]
        return not missing and not found, (f"prompt of {len(text)} characters" + (f"; lacks {missing}" if missing
                                           else "") + (f"; holds {found}" if found else ""))

    return check


@functools.cache
def _store():
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    store = InMemoryDocumentStore()
    store.write_documents(_documents())
    return store


@functools.cache
def _cad_reader():
    from icr2_components.readers import ContextAwareDecodingReader

    reader = ContextAwareDecodingReader(model="tiny-random-mistral", technique="cad", max_new_tokens=2, device="cpu")
    reader.warm_up()
    return reader


@functools.cache
def _suppression_reader():
    from icr2_components.readers import HeadSuppressionReader

    reader = HeadSuppressionReader(model="tiny-random-mistral", heads=[[0, 0]], max_new_tokens=2, device="cpu")
    reader.warm_up()
    return reader


@functools.cache
def _local_reader():
    from icr2_components.readers import LocalChatReader

    reader = LocalChatReader(model="tiny-random-mistral", max_new_tokens=2, device="cpu")
    reader.warm_up()
    return reader


@functools.cache
def _rap_filter():
    from icr2_components.filters import RetrievalAttentionFilter

    rap = RetrievalAttentionFilter(artifact="rap_heads_smollm2", top_m=2, device="cpu", max_context_tokens=4096)
    rap.warm_up()
    return rap


@functools.cache
def _gate():
    from icr2_components.gates import TimeAwareRetrievalGate

    gate = TimeAwareRetrievalGate(method="ta_are", model=None, today="2025-06-01",
                                  server={"api_base_url": LLAMA_URL, "model": "smollm2-135m-instruct",
                                          "timeout_s": 120, "max_retries": 1})
    gate.warm_up()
    return gate


@functools.cache
def _served_reader():
    from icr2_components.readers import ServedChatReader

    reader = ServedChatReader(api_base_url=LLAMA_URL, model="smollm2-135m-instruct", max_new_tokens=4,
                              context_length=8192, timeout_s=120, max_retries=1)
    reader.warm_up()
    return reader


def _one_route(result: dict) -> tuple[bool, str]:
    """A gate's run routes the query one way (retrieval or not) and records its decision."""
    routes = sorted(k for k in result if k != "decision")
    return len(routes) == 1 and isinstance(result.get("decision"), dict), f"routed to {routes}"


NGINX_PAGE = b"<html><body>Welcome to nginx!</body></html>"  # a web server that is not an LLM server


def _user(text: str):
    from haystack.dataclasses import ChatMessage

    return [ChatMessage.from_user(text)]


def _contextual(question: str = "Who wrote it?", context: str = "Passage: Alice wrote the book."):
    """A prompt with a context, as the context-contrasting readers receive it (context, then question)."""
    return _user(f"Context: {context}\nQuestion: {question}")


MEMORY = "Question: Who wrote it?"


# -- the cases ------------------------------------------------------------------------------------------------


def reorderer_cases() -> list[Call]:
    from haystack import Document

    from icr2_components import reorderers as r

    out: list[Call] = []
    docs = _documents()
    ids = [d.id for d in docs]
    classes = [r.PrimacyReorderer, r.RecencyReorderer, r.ReverseReorderer, r.LostInTheMiddleReorderer,
               r.GoldAtPositionReorderer]
    for cls in classes:
        name = cls.__name__
        gold = {"gold_ids": ["d3"]} if cls is r.GoldAtPositionReorderer else {}
        out.append(Call(f"{name}(budget_passages=0)", name, lambda c=cls: c(budget_passages=0),
                        says=("budget_passages", "0")))
        out.append(Call(f"{name}(budget_tokens=-5)", name, lambda c=cls: c(budget_tokens=-5),
                        says=("budget_tokens", "-5")))
        out.append(Call(f'{name}(budget_passages="3") (a string)', name, lambda c=cls: c(budget_passages="3"),
                        says=("budget_passages", "'3'")))
        out.append(Call(f'{name}(relevance="bogus")', name, lambda c=cls: c(relevance="bogus"),
                        says=("relevance", "bogus")))
        out.append(Call(f"{name}.run(documents=[])", name, lambda c=cls, g=gold: c().run(documents=[], **g),
                        **({"says": ("gold_ids", "d3")} if gold else {"right": returns_empty("documents")})))
        out.append(Call(f"{name}.run(documents=None)", name, lambda c=cls, g=gold: c().run(documents=None, **g),
                        says=("documents", "None")))
        out.append(Call(f"{name}.run(budget_passages=0) at run time", name,
                        lambda c=cls, g=gold: c().run(documents=_documents(), budget_passages=0, **g),
                        says=("budget_passages", "0")))
        out.append(Call(f"{name}.run(documents=['a string'])", name,
                        lambda c=cls, g=gold: c().run(documents=["just a string"], **g),
                        says=("documents[0]", "str")))
    # what each keeps and in which order, on the edge values
    out.append(Call("PrimacyReorderer.run(budget_passages=100) (more than given)", "PrimacyReorderer",
                    lambda: r.PrimacyReorderer().run(documents=_documents(), budget_passages=100),
                    right=returns_ids(ids)))
    out.append(Call("ReverseReorderer.run(budget_passages=2) keeps the 2 most relevant, reversed", "ReverseReorderer",
                    lambda: r.ReverseReorderer().run(documents=_documents(), budget_passages=2),
                    right=returns_ids(["d1", "d0"])))
    out.append(Call("PrimacyReorderer over documents with content None", "PrimacyReorderer",
                    lambda: r.PrimacyReorderer(budget_passages=2).run(
                        documents=[Document(id="n", content=None), *_documents(2)]),
                    says=("Document n", "no text")))
    out.append(Call("GoldAtPositionReorderer(position=0)", "GoldAtPositionReorderer",
                    lambda: r.GoldAtPositionReorderer(position=0), says=("position", "0")))
    out.append(Call("GoldAtPositionReorderer.run(position=-9) (before the first of 6)", "GoldAtPositionReorderer",
                    lambda: r.GoldAtPositionReorderer().run(documents=_documents(), gold_ids=["d3"], position=-9),
                    says=("position", "-9")))
    out.append(Call("GoldAtPositionReorderer.run(position=99) past the last passage", "GoldAtPositionReorderer",
                    lambda: r.GoldAtPositionReorderer().run(documents=_documents(), gold_ids=["d3"], position=99),
                    says=("position", "99")))
    out.append(Call("GoldAtPositionReorderer.run(gold_ids=['nowhere']) (not among the documents)",
                    "GoldAtPositionReorderer",
                    lambda: r.GoldAtPositionReorderer().run(documents=_documents(), gold_ids=["nowhere"], position=2),
                    says=("gold", "nowhere")))
    out.append(Call("GoldAtPositionReorderer.run(position=3) puts the gold passage third", "GoldAtPositionReorderer",
                    lambda: r.GoldAtPositionReorderer().run(documents=_documents(), gold_ids=["d5"], position=3),
                    right=lambda res: (_ids(res)[2] == "d5" and sorted(_ids(res)) == sorted(ids),
                                       f"returned {_ids(res)}")))
    return out


def prompt_builder_cases() -> list[Call]:
    from haystack import Document
    from haystack.dataclasses import ChatMessage

    from icr2_components import builders as b

    out: list[Call] = []
    cic = b.CorpusInContextPromptBuilder
    out += [
        Call('CorpusInContextPromptBuilder(task_type="poetry")', "CorpusInContextPromptBuilder",
             lambda: cic(task_type="poetry"), says=("task_type", "poetry")),
        Call('CorpusInContextPromptBuilder(query_aware="yes")', "CorpusInContextPromptBuilder",
             lambda: cic(query_aware="yes"), says=("query_aware", "'yes'")),
        Call('CorpusInContextPromptBuilder.run(query="")', "CorpusInContextPromptBuilder",
             lambda: cic().run(query="", documents=_documents(2)), says=("query", "''")),
        Call("CorpusInContextPromptBuilder.run(query=None)", "CorpusInContextPromptBuilder",
             lambda: cic().run(query=None, documents=_documents(2)), says=("query", "None")),
        Call("CorpusInContextPromptBuilder.run(query=42)", "CorpusInContextPromptBuilder",
             lambda: cic().run(query=42, documents=_documents(2)), says=("query", "42")),
        Call("CorpusInContextPromptBuilder.run(documents=[]) (closed book)", "CorpusInContextPromptBuilder",
             lambda: cic().run(query="Who wrote Hamlet?", documents=[]),
             right=prompt_holds("Who wrote Hamlet?", absent=("Passage 0",))),
        Call("CorpusInContextPromptBuilder.run(documents=None)", "CorpusInContextPromptBuilder",
             lambda: cic().run(query="Who?", documents=None), says=("documents", "None")),
        Call("CorpusInContextPromptBuilder over a document with content None", "CorpusInContextPromptBuilder",
             lambda: cic().run(query="Who?", documents=[Document(id="n", content=None), *_documents(1)]),
             says=("Document n", "no text")),
        Call('CorpusInContextPromptBuilder.run(task_type="poetry") at run time', "CorpusInContextPromptBuilder",
             lambda: cic().run(query="Who?", documents=_documents(1), task_type="poetry"),
             says=("task_type", "poetry")),
        Call("CorpusInContextPromptBuilder over 2,000 passages (an oversized prompt: built, counted later)",
             "CorpusInContextPromptBuilder",
             lambda: cic().run(query="Who?", documents=_documents(2000)),
             right=prompt_holds("Passage 1999", "Who?")),
        Call("CorpusInContextPromptBuilder.run(documents=['a string'])", "CorpusInContextPromptBuilder",
             lambda: cic().run(query="Who?", documents=["a string"]), says=("documents[0]", "str")),
    ]
    cu = b.ContextUsePromptBuilder
    out += [
        Call('ContextUsePromptBuilder(instruction="bogus")', "ContextUsePromptBuilder",
             lambda: cu(instruction="bogus"), says=("instruction", "bogus")),
        Call('ContextUsePromptBuilder.run(instruction="bogus") at run time', "ContextUsePromptBuilder",
             lambda: cu().run(query="Who?", documents=_documents(1), instruction="bogus"),
             says=("instruction", "bogus")),
        Call('ContextUsePromptBuilder.run(query="  ")', "ContextUsePromptBuilder",
             lambda: cu().run(query="  ", documents=_documents(1)), says=("query",)),
        Call("ContextUsePromptBuilder.run(documents=None)", "ContextUsePromptBuilder",
             lambda: cu().run(query="Who?", documents=None), says=("documents", "None")),
        Call("ContextUsePromptBuilder.run(documents=[])", "ContextUsePromptBuilder",
             lambda: cu().run(query="Who wrote Hamlet?", documents=[]), right=prompt_holds("Who wrote Hamlet?")),
    ]
    rj = b.RelevanceJudgePromptBuilder
    out += [
        Call('RelevanceJudgePromptBuilder(instruction="")', "RelevanceJudgePromptBuilder",
             lambda: rj(instruction=""), says=("instruction", "non-empty")),
        Call("RelevanceJudgePromptBuilder.run(documents=[])", "RelevanceJudgePromptBuilder",
             lambda: rj().run(query="Who?", documents=[]), says=("documents",)),
        Call("RelevanceJudgePromptBuilder.run(query=None)", "RelevanceJudgePromptBuilder",
             lambda: rj().run(query=None, documents=_documents(1)), says=("query", "None")),
    ]
    ma = b.MultiAgentAnswerPromptBuilder
    yes = [ChatMessage.from_assistant("yes")]
    out += [
        Call('MultiAgentAnswerPromptBuilder(on_unclear="maybe")', "MultiAgentAnswerPromptBuilder",
             lambda: ma(on_unclear="maybe"), says=("on_unclear", "maybe")),
        Call('MultiAgentAnswerPromptBuilder(memory_prompt="no placeholder")', "MultiAgentAnswerPromptBuilder",
             lambda: ma(memory_prompt="no placeholder"), says=("memory_prompt", "{query}")),
        Call("MultiAgentAnswerPromptBuilder: one 'yes' for the 3 documents judged together",
             "MultiAgentAnswerPromptBuilder",
             lambda: ma().run(query="Who?", documents=_documents(3), judge_replies=yes),
             right=prompt_holds("Passage 0", "Passage 2", "Who?")),
        Call("MultiAgentAnswerPromptBuilder.run(judge_replies=['yes']) (a string)", "MultiAgentAnswerPromptBuilder",
             lambda: ma().run(query="Who?", documents=_documents(1), judge_replies=["yes"]),
             says=("judge_replies[0]", "str")),
        Call("MultiAgentAnswerPromptBuilder: a 'no' and query None", "MultiAgentAnswerPromptBuilder",
             lambda: ma().run(query=None, documents=_documents(1), judge_replies=[ChatMessage.from_assistant("no")]),
             says=("query", "None")),
        Call("MultiAgentAnswerPromptBuilder.run(judge_replies=None)", "MultiAgentAnswerPromptBuilder",
             lambda: ma().run(query="Who?", documents=_documents(1), judge_replies=None),
             says=("judge_replies", "None")),
        Call("MultiAgentAnswerPromptBuilder.run(documents=[], judge_replies=[]) (memory prompt)",
             "MultiAgentAnswerPromptBuilder",
             lambda: ma().run(query="Who wrote Hamlet?", documents=[], judge_replies=[]),
             says=("judge_replies",)),
    ]
    return out


def corpus_builder_cases() -> list[Call]:
    from icr2_components.builders import ConfounderAwareCorpusBuilder as B

    n = "ConfounderAwareCorpusBuilder"
    gold = _documents(1)
    confounders = _documents(6)[1:]
    out = [
        Call(f"{n}(confounding_ratio=-1)", n, lambda: B(confounding_ratio=-1), says=("confounding_ratio", "-1")),
        Call(f'{n}(confounding_ratio="half")', n, lambda: B(confounding_ratio="half"),
             says=("confounding_ratio", "half")),
        Call(f"{n}(confounding_ratio=nan)", n, lambda: B(confounding_ratio=float("nan")),
             says=("confounding_ratio", "nan")),
        Call(f"{n}(budget_passages=0)", n, lambda: B(budget_passages=0), says=("budget_passages", "0")),
        Call(f"{n}(near_duplicate_threshold=1.5)", n, lambda: B(budget_passages=4, near_duplicate_threshold=1.5),
             says=("near_duplicate_threshold", "1.5")),
        Call(f'{n}(seed="x")', n, lambda: B(budget_passages=4, seed="x"), says=("seed", "'x'")),
        Call(f'{n}(shuffle="no")', n, lambda: B(budget_passages=4, shuffle="no"), says=("shuffle", "'no'")),
        Call(f"{n}(retrievers=['bm25', 'bm25'])", n, lambda: B(retrievers=["bm25", "bm25"], budget_passages=4),
             says=("repeat", "bm25")),
        Call(f"{n}(retrievers=['query']) (a reserved name)", n, lambda: B(retrievers=["query"], budget_passages=4),
             says=("query", "reserved")),
        Call(f"{n}.run(confounding_ratio=-0.5) at run time", n,
             lambda: B(budget_passages=4).run(query="Who?", gold_documents=gold, confounding_ratio=-0.5),
             says=("confounding_ratio", "-0.5")),
        Call(f"{n}.run(budget_passages=0) at run time", n,
             lambda: B(budget_passages=4).run(query="Who?", gold_documents=gold, budget_passages=0),
             says=("budget_passages", "0")),
        Call(f'{n}.run(query="")', n, lambda: B(budget_passages=4).run(query="", gold_documents=gold),
             says=("query", "''")),
        Call(f"{n}.run() with no gold and no ranked list", n,
             lambda: B(budget_passages=4, strict_ratio=False).run(query="Who?"),
             says=("No candidates", "empty")),
        Call(f"{n}.run(gold_documents=[None])", n,
             lambda: B(budget_passages=4).run(query="Who?", gold_documents=[None]), says=("gold_documents[0]", "None")),
        Call(f'{n}.run(seed="x") at run time', n,
             lambda: B(budget_passages=4).run(query="Who?", gold_documents=gold, seed="x"), says=("seed", "'x'")),
        Call(f"{n}: gold among 5 BM25 confounders, budget 3 passages", n,
             lambda: B(retrievers=["bm25"], budget_passages=3, shuffle=False, strict_ratio=False).run(
                 query="Who?", gold_documents=gold, bm25=confounders),
             right=lambda res: ("d0" in _ids(res) and len(_ids(res)) == 3, f"returned {_ids(res)}")),
        Call(f"{n}(retrievers=['bm25']).run(dense=[...]) (a list it was not told of)", n,
             lambda: B(retrievers=["bm25"], budget_passages=3).run(query="Who?", gold_documents=gold,
                                                                  dense=confounders),
             says=("dense",)),
    ]
    return out


def retriever_cases() -> list[Call]:
    from icr2_components.retrievers import IndexRetriever as R

    n = "IndexRetriever"
    out = [
        Call(f"{n}(top_k=0) over a document store", n, lambda: R(document_store=_store(), method="bm25", top_k=0),
             says=("top_k", "0")),
        Call(f'{n}(top_k="5") over a document store', n, lambda: R(document_store=_store(), method="bm25",
                                                                    top_k="5"), says=("top_k", "'5'")),
        Call(f'{n}(method="sparse") over a document store', n, lambda: R(document_store=_store(), method="sparse"),
             says=("method", "sparse")),
        Call(f'{n}(method="bm42") over an index', n, lambda: R(index="kilt-sample", method="bm42"),
             says=("method", "bm42")),
        Call(f'{n}(index="no-such-index")', n, lambda: R(index="no-such-index").warm_up(),
             says=("no-such-index",)),
        Call(f'{n}(index="")', n, lambda: R(index=""), says=("index",)),
        Call(f"{n}(document_store=a dict)", n, lambda: R(document_store={"documents": []}, method="bm25"),
             says=("InMemoryDocumentStore", "not dict")),
        Call(f"{n}.run(top_k=0) at run time", n,
             lambda: R(document_store=_store(), method="bm25").run(query="topic", top_k=0), says=("top_k", "0")),
        Call(f"{n}.run(top_k=-3) at run time", n,
             lambda: R(document_store=_store(), method="bm25").run(query="topic", top_k=-3), says=("top_k", "-3")),
        Call(f'{n}.run(method="sparse") at run time', n,
             lambda: R(document_store=_store(), method="bm25").run(query="topic", method="sparse"),
             says=("method", "sparse")),
        Call(f'{n}.run(query="")', n, lambda: R(document_store=_store(), method="bm25").run(query=""),
             says=("query", "''")),
        Call(f"{n}.run(query=None)", n, lambda: R(document_store=_store(), method="bm25").run(query=None),
             says=("query", "None")),
        Call(f"{n}.run(filters=...) that is not a Haystack filter", n,
             lambda: R(document_store=_store(), method="bm25").run(query="topic", filters={"title": "x"}),
             says=("filters", "'title'")),
        Call(f"{n}: dense over a store without query_embedding", n,
             lambda: R(document_store=_store(), method="dense").run(query="topic"), says=("query_embedding",)),
        Call(f"{n}: a 100,000-character query (BM25, in memory)", n,
             lambda: R(document_store=_store(), method="bm25", top_k=2).run(query="topic " * 16_000 + "w3x7"),
             right=lambda res: (len(res["documents"]) == 2, f"{len(res['documents'])} documents")),
        Call(f"{n}.run(top_k=2) returns the 2 best BM25 matches", n,
             lambda: R(document_store=_store(), method="bm25").run(query="topic w4x1 w4x2", top_k=2),
             right=lambda res: (_ids(res)[:1] == ["d4"] and len(_ids(res)) == 2, f"returned {_ids(res)}")),
    ]
    return out


def gate_cases() -> list[Call]:
    from icr2_components.gates import TimeAwareRetrievalGate as G

    n = "TimeAwareRetrievalGate"
    server = {"api_base_url": LLAMA_URL, "model": "smollm2-135m-instruct"}
    out = [
        Call(f'{n}(method="coin_flip")', n, lambda: G(method="coin_flip", model=None, server=server),
             says=("method", "coin_flip")),
        Call(f'{n}(on_unparsed="shrug")', n, lambda: G(model=None, server=server, on_unparsed="shrug"),
             says=("on_unparsed", "shrug")),
        Call(f"{n}(max_new_tokens=0)", n, lambda: G(model=None, server=server, max_new_tokens=0),
             says=("max_new_tokens", "0")),
        Call(f"{n}(top_logprobs=50)", n, lambda: G(model=None, server=server, top_logprobs=50),
             says=("top_logprobs", "50")),
        Call(f'{n}(today="yesterday")', n, lambda: G(model=None, server=server, today="yesterday"),
             says=("today", "yesterday")),
        Call(f"{n}(server=a string)", n, lambda: G(model=None, server=LLAMA_URL), says=("server",)),
        Call(f"{n}(server with port 99999)", n,
             lambda: G(model=None, server={**server, "api_base_url": "http://127.0.0.1:99999/v1"}),
             says=("port", "99999")),
        Call(f"{n}(server with an unknown key)", n, lambda: G(model=None, server={**server, "temprature": 0}),
             says=("temprature",)),
        Call(f"{n}(server=..., chat_generator=...)", n, lambda: G(model=None, server=server, chat_generator=object()),
             says=("chat_generator", "server")),
        Call(f"{n}(model=None) and no server", n, lambda: G(model=None), says=("model",)),
        Call(f'{n}.run(query="")', n, lambda: _gate().run(query=""), says=("query", "''")),
        Call(f"{n}.run(query=None)", n, lambda: _gate().run(query=None), says=("query", "None")),
        Call(f'{n}.run(today="2024-13-45")', n, lambda: _gate().run(query="Who won?", today="2024-13-45"),
             says=("today", "2024-13-45")),
        Call(f'{n}.run(method="coin_flip") at run time', n, lambda: _gate().run(query="Who?", method="coin_flip"),
             says=("method", "coin_flip")),
        Call(f"{n}.run(threshold=2.0) (threshold method)", n,
             lambda: _gate().run(query="Who?", method="threshold", threshold=2.0), says=("threshold", "2.0")),
        Call(f"{n}.run(n_yes=-1)", n, lambda: _gate().run(query="Who?", n_yes=-1), says=("n_yes", "-1")),
        Call(f"{n}.run(n_no=1.5)", n, lambda: _gate().run(query="Who?", n_no=1.5), says=("n_no", "1.5")),
        Call(f"{n} over the llama.cpp server: a 60,000-word query", n,
             lambda: _gate().run(query="why " * 60_000), says=("context", "tokens")),
        Call(f"{n} over the llama.cpp server: a question decides", n,
             lambda: _gate().run(query="Who won the most recent FIFA World Cup?"),
             right=_one_route),
    ]
    garbage = {}

    def over_garbage():
        server_ = garbage.setdefault("server", FixedAnswerServer(200, NGINX_PAGE))
        try:
            gate = G(method="ta_are", model=None, server={"api_base_url": server_.url, "model": "x", "max_retries": 0,
                                                          "timeout_s": 10}, today="2025-06-01")
            gate.warm_up()
            return gate.run(query="Who won the most recent FIFA World Cup?")
        finally:
            server_.close()

    out.append(Call(f"{n} over a server answering an HTML page", n, over_garbage, says=("server",)))
    return out


def rap_cases() -> list[Call]:
    from haystack import Document

    from icr2_components.filters import RetrievalAttentionFilter as F

    n = "RetrievalAttentionFilter"
    out = [
        Call(f'{n}(artifact="no_such_heads")', n, lambda: F(artifact="no_such_heads").warm_up(),
             says=("no_such_heads",)),
        Call(f"{n}(artifact=a folder)", n, lambda: F(artifact=str(REPO / "pipelines")).warm_up(),
             says=("pipelines", "folder")),
        Call(f"{n}(artifact=a file that is not JSON)", n, lambda: F(artifact=str(REPO / "README.md")).warm_up(),
             says=("README.md", "not")),
        Call(f"{n}(top_m=0)", n, lambda: F(artifact="rap_heads_smollm2", top_m=0), says=("top_m", "0")),
        Call(f"{n}(num_heads=0)", n, lambda: F(artifact="rap_heads_smollm2", num_heads=0), says=("num_heads", "0")),
        Call(f'{n}(dtype="float8")', n, lambda: F(artifact="rap_heads_smollm2", dtype="float8"),
             says=("dtype", "float8")),
        Call(f'{n}(device="tpu")', n, lambda: F(artifact="rap_heads_smollm2", device="tpu"), says=("device", "tpu")),
        Call(f"{n}(max_context_tokens=0)", n, lambda: F(artifact="rap_heads_smollm2", max_context_tokens=0),
             says=("max_context_tokens", "0")),
        Call(f"{n}.run(documents=[]) with the shipped heads", n, lambda: _rap_filter().run(documents=[], query="Who?"),
             right=returns_empty("documents")),
        Call(f"{n}.run(top_m=-1) at run time", n, lambda: _rap_filter().run(documents=_documents(3), query="Who?",
                                                                           top_m=-1), says=("top_m", "-1")),
        Call(f"{n}.run(num_heads=100000) (more heads than probed)", n,
             lambda: _rap_filter().run(documents=_documents(3), query="Who?", num_heads=100_000),
             says=("num_heads", "100000")),
        Call(f'{n}.run(query="")', n, lambda: _rap_filter().run(documents=_documents(3), query=""),
             says=("query", "''")),
        Call(f"{n} over a document with content None", n,
             lambda: _rap_filter().run(documents=[Document(id="n", content=None), *_documents(2)], query="Who?"),
             says=("Document n", "no text")),
        Call(f"{n}: 400 passages, over max_context_tokens", n,
             lambda: _rap_filter().run(documents=_documents(400), query="Who?"), says=("tokens", "4096")),
        Call(f"{n}: 3 passages, top_m=2 of one head keeps 2 of them", n,
             lambda: _rap_filter().run(documents=_documents(3), query="What is passage 1 about?", num_heads=1),
             right=lambda res: (len(res["documents"]) == 2 and set(_ids(res)) <= {"d0", "d1", "d2"},
                                f"kept {_ids(res)}")),
    ]
    return out


def served_reader_cases() -> list[Call]:
    from icr2_components.readers import ServedChatReader as S

    n = "ServedChatReader"
    base = {"api_base_url": LLAMA_URL, "model": "smollm2-135m-instruct"}
    out = [
        Call(f"{n}(api_base_url with port 99999)", n, lambda: S(**{**base, "api_base_url": "http://127.0.0.1:99999/v1"}),
             says=("port", "99999")),
        Call(f'{n}(api_base_url="localhost:8089") (no scheme)', n,
             lambda: S(**{**base, "api_base_url": "localhost:8089"}), says=("api_base_url", "localhost:8089")),
        Call(f'{n}(model="")', n, lambda: S(**{**base, "model": ""}), says=("model",)),
        Call(f"{n}(max_new_tokens=0)", n, lambda: S(**base, max_new_tokens=0), says=("max_new_tokens", "0")),
        Call(f"{n}(temperature=-1)", n, lambda: S(**base, temperature=-1), says=("temperature", "-1")),
        Call(f"{n}(timeout_s=0)", n, lambda: S(**base, timeout_s=0), says=("timeout_s", "0")),
        Call(f"{n}(timeout_s=nan)", n, lambda: S(**base, timeout_s=float("nan")), says=("timeout_s", "nan")),
        Call(f"{n}(max_retries=-1)", n, lambda: S(**base, max_retries=-1), says=("max_retries", "-1")),
        Call(f"{n}(context_length=0)", n, lambda: S(**base, context_length=0), says=("context_length", "0")),
        Call(f'{n}(generation_kwargs="greedy")', n, lambda: S(**base, generation_kwargs="greedy"),
             says=("generation_kwargs", "greedy")),
        Call(f"{n}.run(messages=[])", n, lambda: _served_reader().run(messages=[]), says=("messages",)),
        Call(f"{n}.run(messages=None)", n, lambda: _served_reader().run(messages=None), says=("messages", "None")),
        Call(f'{n}.run(messages=["a string"])', n, lambda: _served_reader().run(messages=["What?"]),
             says=("messages", "str")),
        Call(f"{n}.run(max_new_tokens=0) at run time", n,
             lambda: _served_reader().run(messages=_user("Hi"), max_new_tokens=0), says=("max_new_tokens", "0")),
        Call(f'{n}.run(max_new_tokens="8") at run time', n,
             lambda: _served_reader().run(messages=_user("Hi"), max_new_tokens="8"), says=("max_new_tokens", "'8'")),
        Call(f"{n}: a 40,000-word prompt to an 8,192-token server", n,
             lambda: _served_reader().run(messages=_user("tell " * 40_000)), says=("8192", "tokens")),
        Call(f"{n}: an empty user message", n, lambda: _served_reader().run(messages=_user("")),
             says=("messages", "no text")),
        Call(f"{n}: a server on a dead port", n, lambda: S(api_base_url="http://127.0.0.1:9/v1", model="m",
                                                            max_retries=0, timeout_s=5, context_length=2048,
                                                            tokenizer=None).run(messages=_user("Hi")),
             says=("127.0.0.1:9",)),
        Call(f"{n}: a server answering an HTML page", n, _served_over_garbage, says=("not",)),
        Call(f"{n} over the llama.cpp server answers one question", n,
             lambda: _served_reader().run(messages=_user("What is the capital of France? One word.")),
             right=lambda res: (bool(res["replies"]) and bool(res["replies"][0].text),
                                f"replied {res['replies'][0].text!r}")),
    ]
    return out


def _served_over_garbage():
    from icr2_components.readers import ServedChatReader

    server = FixedAnswerServer(200, NGINX_PAGE)
    try:
        reader = ServedChatReader(api_base_url=server.url, model="m", max_retries=0, timeout_s=10,
                                  context_length=2048, tokenizer=None)
        reader.warm_up()
        return reader.run(messages=_user("Hi"))
    finally:
        server.close()


def decoding_reader_cases() -> list[Call]:
    from icr2_components.readers import ContextAwareDecodingReader as C
    from icr2_components.readers import HeadSuppressionReader as H
    from icr2_components.readers import LocalChatReader as L

    tiny = {"model": "tiny-random-mistral", "device": "cpu"}
    c, h, lo = "ContextAwareDecodingReader", "HeadSuppressionReader", "LocalChatReader"
    messages = _contextual()

    def cad(**overrides):
        return _cad_reader().run(messages, _user(MEMORY), **overrides)

    out = [
        Call(f'{c}(technique="magic")', c, lambda: C(**tiny, technique="magic"), says=("technique", "magic")),
        Call(f"{c}(alpha=-1)", c, lambda: C(**tiny, alpha=-1), says=("alpha", "-1")),
        Call(f'{c}(alpha="strong")', c, lambda: C(**tiny, alpha="strong"), says=("alpha", "strong")),
        Call(f'{c}(passes="both")', c, lambda: C(**tiny, passes="both"), says=("passes", "both")),
        Call(f"{c}(max_new_tokens=0)", c, lambda: C(**tiny, max_new_tokens=0), says=("max_new_tokens", "0")),
        Call(f"{c}(technique='cad', lamda=0.5) (a misspelt rule parameter)", c, lambda: C(**tiny, lamda=0.5),
             says=("lamda",)),
        Call(f'{c}(dtype="int4")', c, lambda: C(**tiny, dtype="int4"), says=("dtype", "int4")),
        Call(f"{c}(max_input_tokens=-1)", c, lambda: C(**tiny, max_input_tokens=-1), says=("max_input_tokens", "-1")),
        Call(f'{c}.run(technique="magic") at run time', c, lambda: cad(technique="magic"),
             says=("technique", "magic")),
        Call(f"{c}.run(alpha=-2) at run time", c, lambda: cad(alpha=-2), says=("alpha", "-2")),
        Call(f"{c}.run(alpha=nan) at run time", c, lambda: cad(alpha=float("nan")),
             says=("alpha", "nan")),
        Call(f"{c}.run(max_new_tokens=0) at run time", c, lambda: cad(max_new_tokens=0),
             says=("max_new_tokens", "0")),
        Call(f'{c}.run(lamda=0.5) at run time (a misspelt rule parameter)', c,
             lambda: cad(lamda=0.5), says=("lamda",)),
        Call(f"{c}.run(coiecd_alpha=-1) at run time (COIECD's own parameter out of range)", c,
             lambda: cad(technique="coiecd", coiecd_alpha=-1),
             says=("coiecd", "alpha", "-1")),
        Call(f"{c}.run(memory_messages=['a string'])", c, lambda: _cad_reader().run(messages, ["Who wrote it?"]),
             says=("memory_messages[0]", "str")),
        Call(f"{c}.run(messages=[])", c, lambda: _cad_reader().run([], _user(MEMORY)), says=("messages",)),
        Call(f"{c}.run(messages=None)", c, lambda: _cad_reader().run(None, _user(MEMORY)), says=("messages", "None")),
        Call(f"{c}: a prompt with no context to contrast", c, lambda: _cad_reader().run(_user(MEMORY), _user(MEMORY)),
             says=("context",)),
        Call(f"{c}: a prompt longer than the model's context window", c,
             lambda: _cad_reader().run(_contextual(context="Passage: " + "word " * 20_000), _user(MEMORY)),
             says=("tokens",)),
        Call(f"{c} answers with 2 new tokens", c, lambda: cad(max_new_tokens=2),
             right=lambda res: (len(res["replies"]) == 1, f"{len(res['replies'])} reply")),
        Call(f'{h}(direction="sideways")', h, lambda: H(**tiny, heads=[[0, 0]], direction="sideways"),
             says=("direction", "sideways")),
        Call(f"{h}(num_heads=-2)", h, lambda: H(**tiny, heads=None, artifact="ph3_heads_smollm2", num_heads=-2),
             says=("num_heads", "-2")),
        Call(f'{h}(scale="half")', h, lambda: H(**tiny, heads=[[0, 0]], scale="half"), says=("scale", "half")),
        Call(f"{h}(heads=[[999, 0]]) (no layer 999)", h,
             lambda: H(**tiny, heads=[[999, 0]], max_new_tokens=2).run(_user("Hi")),
             says=("999",)),
        Call(f"{h}(heads=[[0]]) (not [layer, head])", h, lambda: H(**tiny, heads=[[0]]), says=("heads",)),
        Call(f'{h}(artifact="no_such_heads")', h, lambda: H(**tiny, artifact="no_such_heads").warm_up(),
             says=("no_such_heads",)),
        Call(f"{h}(artifact=None, heads=None) (nothing to suppress)", h, lambda: H(**tiny), says=("heads",)),
        Call(f"{h}.run(num_heads=-1) at run time", h, lambda: _suppression_reader().run(_user("Hi"), num_heads=-1),
             says=("num_heads", "-1")),
        Call(f'{h}.run(direction="up") at run time', h,
             lambda: _suppression_reader().run(_user("Hi"), direction="up"), says=("direction", "up")),
        Call(f"{h}.run(max_new_tokens=0) at run time", h,
             lambda: _suppression_reader().run(_user("Hi"), max_new_tokens=0), says=("max_new_tokens", "0")),
        Call(f"{lo}(max_new_tokens=0)", lo, lambda: L(**tiny, max_new_tokens=0), says=("max_new_tokens", "0")),
        Call(f"{lo}(temperature=-1)", lo, lambda: L(**tiny, temperature=-1), says=("temperature", "-1")),
        Call(f'{lo}(do_sample="yes")', lo, lambda: L(**tiny, do_sample="yes"), says=("do_sample", "yes")),
        Call(f'{lo}(device="tpu")', lo, lambda: L(model="tiny-random-mistral", device="tpu"),
             says=("device", "tpu")),
        Call(f'{lo}(model="no-such-org/no-such-model")', lo,
             lambda: L(model="no-such-org/no-such-model", device="cpu").warm_up(),
             says=("no-such-org/no-such-model",)),
        Call(f"{lo}.run(messages=[])", lo, lambda: _local_reader().run([]), says=("messages",)),
        Call(f"{lo}.run(max_new_tokens=-4) at run time", lo,
             lambda: _local_reader().run(_user("Hi"), max_new_tokens=-4), says=("max_new_tokens", "-4")),
        Call(f"{lo}: a prompt longer than the model's context window", lo,
             lambda: _local_reader().run(_user("word " * 20_000)), says=("tokens",)),
        Call(f"{lo} answers with 2 new tokens", lo, lambda: _local_reader().run(_user("Hi"), max_new_tokens=2),
             right=lambda res: (len(res["replies"]) == 1, f"{len(res['replies'])} reply")),
    ]
    return out


def other_component_cases() -> list[Call]:
    from haystack.dataclasses import ChatMessage

    from icr2_components.rankers import BiEncoderRanker
    from icr2_components.readers import RetrievalReplyParser

    p, bi = "RetrievalReplyParser", "BiEncoderRanker"
    return [
        Call(f"{p}(match_threshold=1.5)", p, lambda: RetrievalReplyParser(match_threshold=1.5),
             says=("match_threshold", "1.5")),
        Call(f"{p}.run(replies=[])", p, lambda: RetrievalReplyParser().run(replies=[], documents=_documents(2)),
             right=returns_empty("replies")),
        Call(f"{p}.run(replies=None)", p, lambda: RetrievalReplyParser().run(replies=None), says=("replies", "None")),
        Call(f"{p}: a reply naming no passage", p,
             lambda: RetrievalReplyParser().run(replies=[ChatMessage.from_assistant("I have no idea.")],
                                                documents=_documents(2)),
             right=lambda res: (not res.get("documents"), f"kept {len(res.get('documents') or [])} documents")),
        Call(f"{bi}(top_k=0)", bi, lambda: BiEncoderRanker(top_k=0), says=("top_k", "0")),
        Call(f"{bi}(batch_size=0)", bi, lambda: BiEncoderRanker(batch_size=0), says=("batch_size", "0")),
        Call(f"{bi}.run(documents=[])", bi, lambda: _bi_ranker().run(query="Who?", documents=[]),
             right=returns_empty("documents")),
        Call(f"{bi}.run(top_k=-1) at run time", bi, lambda: _bi_ranker().run(query="Who?", documents=_documents(2),
                                                                             top_k=-1), says=("top_k", "-1")),
    ]


@functools.cache
def _bi_ranker():
    from icr2_components.rankers import BiEncoderRanker

    ranker = BiEncoderRanker(device="cpu")
    ranker.warm_up()
    return ranker


def loading_cases(tmp: Path) -> list[Call]:
    from icr2_components import load_pipeline, technique_component
    from icr2_components.backends import load_backend
    from icr2_components.backends.pipelines import backend_from_dict
    from icr2_components.pipeline_spec import PipelineSpec

    lp, tc, ps, bk = "load_pipeline", "technique_component", "PipelineSpec", "backend file"
    not_yaml = tmp / "not_a_pipeline.yaml"
    not_yaml.write_text("- just\n- a list\n")
    no_io = tmp / "no_io.yaml"
    no_io.write_text((REPO / "pipelines" / "closed_book.yaml").read_text().split("\ninputs:")[0] + "\n")
    unsafe = tmp / "unsafe.yaml"
    unsafe.write_text("components:\n  evil:\n    type: os.system\n    init_parameters: {}\nconnections: []\n")
    bad_backend = tmp / "bad_backend.yaml"
    bad_backend.write_text("kind: served\nserved_model: {api_base_url: 'http://127.0.0.1:99999/v1', model: m}\n")
    served = {"kind": "served", "served_model": {"api_base_url": LLAMA_URL, "model": "smollm2-135m-instruct"}}

    def with_model(**changes):
        return {**served, "served_model": {**served["served_model"], **changes}}

    out = [
        Call(f'{lp}("no_such_pipeline")', lp, lambda: load_pipeline("no_such_pipeline"), says=("no_such_pipeline",)),
        Call(f"{lp}(a folder)", lp, lambda: load_pipeline(str(REPO / "pipelines")), says=("pipelines", "folder")),
        Call(f"{lp}(a YAML that is a list)", lp, lambda: load_pipeline(str(not_yaml)), says=("not_a_pipeline.yaml",)),
        Call(f"{lp}(a YAML naming os.system)", lp, lambda: load_pipeline(str(unsafe)), says=("'os'", "allowlist")),
        Call(f"{lp}(None)", lp, lambda: load_pipeline(None), says=("None",)),
        Call(f'{tc}("no_such_technique")', tc, lambda: technique_component("no_such_technique"),
             says=("no_such_technique",)),
        Call(f"{tc}(a pipeline with no declared inputs: Haystack maps every open socket)", tc,
             lambda: technique_component(str(no_io)),
             right=lambda sc: ("query" in (sc.input_mapping or {}), f"inputs {sorted(sc.input_mapping or {})}")),
        Call(f'{tc}("closed_book", backend="nowhere")', tc, lambda: technique_component("closed_book",
                                                                                          backend="nowhere"),
             says=("nowhere",)),
        Call(f'{tc}("closed_book", backend=42)', tc, lambda: technique_component("closed_book", backend=42),
             says=("backend", "42")),
        Call(f'{ps}.from_file("no_such_pipeline")', ps, lambda: PipelineSpec.from_file("no_such_pipeline"),
             says=("no_such_pipeline",)),
        Call(f"{ps}.from_file(a pipeline with no declared inputs)", ps, lambda: PipelineSpec.from_file(str(no_io)),
             says=("inputs",)),
        Call(f"{ps}.from_file(a YAML that is a list)", ps, lambda: PipelineSpec.from_file(str(not_yaml)),
             says=("not_a_pipeline.yaml",)),
        Call(f"{bk}: port 99999", bk, lambda: load_backend(bad_backend), says=("port", "99999")),
        Call(f"{bk}: a file that does not exist", bk, lambda: load_backend(tmp / "nowhere.yaml"),
             says=("nowhere.yaml",)),
        Call(f"{bk}: kind: quantum", bk, lambda: backend_from_dict({"kind": "quantum"}, "b.yaml"),
             says=("kind", "quantum")),
        Call(f"{bk}: served with no served_model section", bk, lambda: backend_from_dict({"kind": "served"}, "b.yaml"),
             says=("served_model",)),
        Call(f"{bk}: timeout_s: 0", bk, lambda: backend_from_dict(with_model(timeout_s=0), "b.yaml"),
             says=("timeout_s", "0")),
        Call(f'{bk}: timeout_s: "soon"', bk, lambda: backend_from_dict(with_model(timeout_s="soon"), "b.yaml"),
             says=("timeout_s", "soon")),
        Call(f"{bk}: max_retries: -1", bk, lambda: backend_from_dict(with_model(max_retries=-1), "b.yaml"),
             says=("max_retries", "-1")),
        Call(f"{bk}: context_length: 0", bk, lambda: backend_from_dict(with_model(context_length=0), "b.yaml"),
             says=("context_length", "0")),
        Call(f"{bk}: max_concurrency: 0", bk, lambda: backend_from_dict({**served, "max_concurrency": 0}, "b.yaml"),
             says=("max_concurrency", "0")),
        Call(f"{bk}: a misspelt key (api_base_ulr)", bk,
             lambda: backend_from_dict({"kind": "served", "served_model": {"api_base_ulr": LLAMA_URL, "model": "m"}},
                                       "b.yaml"), says=("api_base_ulr",)),
        Call(f"{bk}: api_base_url without a host", bk,
             lambda: backend_from_dict(with_model(api_base_url="http:///v1"), "b.yaml"), says=("api_base_url",)),
        Call(f"{bk}: a list instead of a mapping", bk, lambda: backend_from_dict(["served"], "b.yaml"),
             says=("b.yaml",)),
    ]
    return out


def cases(tmp: Path) -> list[Call]:
    return [*reorderer_cases(), *prompt_builder_cases(), *corpus_builder_cases(), *retriever_cases(),
            *decoding_reader_cases(), *other_component_cases(), *loading_cases(tmp), *served_reader_cases(),
            *gate_cases(), *rap_cases(), *odd_value_cases(), *tampered_artifact_cases(tmp)]


def run(tmp: Path, only: list[str] | None = None, progress: Callable | None = None) -> list[dict[str, Any]]:
    """Every component case, in this process; one record per case."""
    import logging

    logging.disable(logging.WARNING)  # the library's warnings are not outcomes; errors are raised
    results = []
    chosen = [c for c in cases(tmp) if only is None or any(o.lower() in c.what.lower() for o in only)]
    for case in (progress(chosen) if progress else chosen):
        record = classify_call(case)
        results.append({"surface": "component", "component": case.component, "input": case.what,
                        "setup": case.setup, "exit": "-", **record})
    logging.disable(logging.NOTSET)
    return results


# -- values that are not finite numbers, text that prints nothing, tampered head artifacts ------------------------

NAN, INF = float("nan"), float("inf")
ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff"


def _scored(*scores):
    from haystack import Document

    return [Document(id=f"d{i}", content=f"Passage {i} about topic {i}.", score=s) for i, s in enumerate(scores)]


def odd_value_cases() -> list[Call]:
    """NaN, infinity and booleans where numbers belong, at init and at run time; documents whose text prints
    nothing or is missing; scores that are not finite under relevance='score'."""
    from haystack import Document

    from icr2_components import reorderers as r
    from icr2_components.builders import ConfounderAwareCorpusBuilder as B
    from icr2_components.rankers import BiEncoderRanker
    from icr2_components.readers import ContextAwareDecodingReader as C
    from icr2_components.readers import HeadSuppressionReader as H
    from icr2_components.readers import LocalChatReader as L
    from icr2_components.readers import RetrievalReplyParser as P
    from icr2_components.readers import ServedChatReader as S
    from icr2_components.retrievers import IndexRetriever as R

    out: list[Call] = []
    for cls in (r.PrimacyReorderer, r.RecencyReorderer, r.ReverseReorderer, r.LostInTheMiddleReorderer):
        name = cls.__name__
        for label, bad in (("nan", NAN), ("inf", INF), ("-inf", -INF), ("'0.9' (a string)", "0.9")):
            out.append(Call(f"{name}(relevance='score') over a score {label}", name,
                            lambda c=cls, b=bad: c(relevance="score").run(documents=_scored(0.9, b, 0.5)),
                            says=("Document d1", "finite")))
        out.append(Call(f"{name}(budget_passages=nan)", name, lambda c=cls: c(budget_passages=NAN),
                        says=("budget_passages",)))
        out.append(Call(f"{name}(budget_passages=True)", name, lambda c=cls: c(budget_passages=True),
                        says=("budget_passages",)))
    g = "GoldAtPositionReorderer"
    out += [
        Call(f"{g}(relevance='score') with a NaN score among the others", g,
             lambda: r.GoldAtPositionReorderer(relevance="score").run(documents=_scored(0.9, 0.8, NAN),
                                                                      gold_ids=["d0"], position=2),
             says=("Document d2", "finite")),
        Call(f"{g}.run(position=nan)", g,
             lambda: r.GoldAtPositionReorderer().run(documents=_documents(), gold_ids=["d3"], position=NAN),
             says=("position",)),
        Call(f"{g}.run(position=True)", g,
             lambda: r.GoldAtPositionReorderer().run(documents=_documents(), gold_ids=["d3"], position=True),
             says=("position",)),
        Call("PrimacyReorderer over a document of zero-width characters (kept: it is text, placed as given)",
             "PrimacyReorderer",
             lambda: r.PrimacyReorderer().run(documents=[*_documents(2), Document(id="z", content=ZERO_WIDTH)]),
             right=lambda res: (_ids(res) == ["d0", "d1", "z"], f"returned {_ids(res)}")),
    ]
    bi = "BiEncoderRanker"
    out += [
        Call(f"{bi} over a document with content None (its title only)", bi,
             lambda: _bi_ranker().run(query="Who?", documents=[*_documents(2), Document(id="n", content=None,
                                                                                       meta={"title": "Who?"})]),
             says=("Document n", "no text")),
        Call(f'{bi} over a document with content ""', bi,
             lambda: _bi_ranker().run(query="Who?", documents=[*_documents(2), Document(id="e", content="")]),
             says=("Document e", "no text")),
        Call(f"{bi} over a document of zero-width characters", bi,
             lambda: _bi_ranker().run(query="Who?", documents=[*_documents(2), Document(id="z", content=ZERO_WIDTH)]),
             says=("Document z", "no text")),
        Call(f"{bi}.run(documents=None)", bi, lambda: _bi_ranker().run(query="Who?", documents=None),
             says=("documents", "None")),
        Call(f"{bi}.run(documents=['a string'])", bi, lambda: _bi_ranker().run(query="Who?", documents=["text"]),
             says=("documents[0]", "str")),
        Call(f"{bi}(batch_size=nan)", bi, lambda: BiEncoderRanker(batch_size=NAN), says=("batch_size",)),
        Call(f'{bi}(batch_size="8")', bi, lambda: BiEncoderRanker(batch_size="8"), says=("batch_size",)),
        Call(f"{bi}(top_k=inf)", bi, lambda: BiEncoderRanker(top_k=INF), says=("top_k",)),
        Call(f"{bi}.run(top_k=True) at run time", bi,
             lambda: _bi_ranker().run(query="Who?", documents=_documents(2), top_k=True), says=("top_k",)),
        Call(f"{bi}: the passage that answers ranks first among 3", bi,
             lambda: _bi_ranker().run(query="What is passage 4 about? topic 4", documents=_documents(6), top_k=1),
             right=lambda res: (_ids(res) == ["d4"], f"returned {_ids(res)}")),
    ]
    tiny = {"model": "tiny-random-mistral", "device": "cpu"}
    out += [
        Call("ContextAwareDecodingReader(alpha=inf)", "ContextAwareDecodingReader", lambda: C(**tiny, alpha=INF),
             says=("alpha",)),
        Call("ContextAwareDecodingReader(alpha=True)", "ContextAwareDecodingReader", lambda: C(**tiny, alpha=True),
             says=("alpha",)),
        Call("ContextAwareDecodingReader.run(alpha=inf) at run time", "ContextAwareDecodingReader",
             lambda: _cad_reader().run(_contextual(), _user(MEMORY), alpha=INF), says=("alpha",)),
        Call("HeadSuppressionReader(scale=nan)", "HeadSuppressionReader",
             lambda: H(**tiny, heads=[[0, 0]], scale=NAN), says=("scale",)),
        Call("HeadSuppressionReader(scale=inf)", "HeadSuppressionReader",
             lambda: H(**tiny, heads=[[0, 0]], scale=INF), says=("scale",)),
        Call("LocalChatReader(temperature=nan)", "LocalChatReader", lambda: L(**tiny, temperature=NAN),
             says=("temperature",)),
        Call("LocalChatReader(max_new_tokens=True)", "LocalChatReader", lambda: L(**tiny, max_new_tokens=True),
             says=("max_new_tokens",)),
        Call("LocalChatReader.run(max_new_tokens=nan) at run time", "LocalChatReader",
             lambda: _local_reader().run(_user("Hi"), max_new_tokens=NAN), says=("max_new_tokens",)),
        Call("ServedChatReader(temperature=nan)", "ServedChatReader",
             lambda: S(api_base_url=LLAMA_URL, model="smollm2-135m-instruct", temperature=NAN),
             says=("temperature",)),
        Call("ServedChatReader(timeout_s=inf)", "ServedChatReader",
             lambda: S(api_base_url=LLAMA_URL, model="smollm2-135m-instruct", timeout_s=INF), says=("timeout_s",)),
        Call("ServedChatReader(max_new_tokens=True)", "ServedChatReader",
             lambda: S(api_base_url=LLAMA_URL, model="smollm2-135m-instruct", max_new_tokens=True),
             says=("max_new_tokens",)),
        Call("ServedChatReader.run(max_new_tokens=True) at run time", "ServedChatReader",
             lambda: _served_reader().run(messages=_user("Hi"), max_new_tokens=True), says=("max_new_tokens",)),
        Call("ServedChatReader: a user message of zero-width characters", "ServedChatReader",
             lambda: _served_reader().run(messages=_user(ZERO_WIDTH)), says=("messages",)),
        Call("RetrievalReplyParser(match_threshold=nan)", "RetrievalReplyParser", lambda: P(match_threshold=NAN),
             says=("match_threshold",)),
        Call("ConfounderAwareCorpusBuilder(confounding_ratio=inf)", "ConfounderAwareCorpusBuilder",
             lambda: B(confounding_ratio=INF), says=("confounding_ratio",)),
        Call("ConfounderAwareCorpusBuilder(near_duplicate_threshold=nan)", "ConfounderAwareCorpusBuilder",
             lambda: B(budget_passages=4, near_duplicate_threshold=NAN), says=("near_duplicate_threshold",)),
        Call("ConfounderAwareCorpusBuilder(budget_passages=True)", "ConfounderAwareCorpusBuilder",
             lambda: B(budget_passages=True), says=("budget_passages",)),
        Call("ConfounderAwareCorpusBuilder.run(confounding_ratio=nan) at run time", "ConfounderAwareCorpusBuilder",
             lambda: B(budget_passages=4).run(query="Who?", gold_documents=_documents(1), confounding_ratio=NAN),
             says=("confounding_ratio",)),
        Call("IndexRetriever(top_k=nan) over a document store", "IndexRetriever",
             lambda: R(document_store=_store(), method="bm25", top_k=NAN), says=("top_k",)),
        Call("IndexRetriever(top_k=True) over a document store", "IndexRetriever",
             lambda: R(document_store=_store(), method="bm25", top_k=True), says=("top_k",)),
        Call("IndexRetriever.run(top_k=inf) at run time", "IndexRetriever",
             lambda: R(document_store=_store(), method="bm25").run(query="topic", top_k=INF), says=("top_k",)),
        Call("IndexRetriever.run(query=zero-width characters)", "IndexRetriever",
             lambda: R(document_store=_store(), method="bm25").run(query=ZERO_WIDTH), says=("query",)),
    ]
    return out


def _tampered_heads(tmp: Path, name: str, change: Callable[[dict], None]) -> str:
    """The shipped RAP heads of SmolLM2, changed by ``change``, written to ``tmp``."""
    data = json.loads((REPO / "icr2_components" / "resources" / "artifacts" / "rap_heads_smollm2.json").read_text())
    change(data)
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(data))
    return str(path)


def tampered_artifact_cases(tmp: Path) -> list[Call]:
    """The shipped retrieval-head artifact, edited: heads the model does not have, heads other than the ranking's,
    wrong types; each read by the RAP filter as a user would (warm_up)."""
    from icr2_components.filters import RetrievalAttentionFilter as F

    n = "RetrievalAttentionFilter"

    def heads_layer_99(d: dict) -> None:
        d["heads"][0] = [99, 0]

    def ranking_layer_99_in_a_100_layer_model(d: dict) -> None:
        d["model_signature"]["num_layers"] = 100
        d["hit_rates"] = [[[0.0] * 9 for _ in range(100)] for _ in d["hit_rates"]]
        d["ranking"][0] = [99, 0]
        d["heads"][0] = [99, 0]

    def swapped(d: dict) -> None:
        d["heads"][0], d["heads"][1] = d["heads"][1], d["heads"][0]

    def head_index_9(d: dict) -> None:
        d["ranking"][1] = [23, 9]
        d["heads"][1] = [23, 9]

    def negative(d: dict) -> None:
        d["ranking"][0] = [-1, 6]
        d["heads"][0] = [-1, 6]

    def string_pair(d: dict) -> None:
        d["ranking"][0] = ["18", "6"]
        d["heads"][0] = ["18", "6"]

    def q_five(d: dict) -> None:
        d["q"] = 5

    def m_zero(d: dict) -> None:
        d["m"] = 0

    def other_format(d: dict) -> None:
        d["format"] = "icr2-retrieval-heads/0"

    def unknown_key(d: dict) -> None:
        d["layers_used"] = [18]

    def no_signature(d: dict) -> None:
        del d["model_signature"]

    cases = (
        ("its heads naming layer 99 (the ranking untouched)", heads_layer_99, ("layer 99",)),
        ("layer 99 in a signature claiming 100 layers (loaded: SmolLM2's 30)", ranking_layer_99_in_a_100_layer_model,
         ("layer 99", "30 layers")),
        ("its first two heads swapped (not the ranking's first Q)", swapped, ("ranking",)),
        ("head 9 of a 9-head layer", head_index_9, ("head 9",)),
        ("layer -1", negative, ("layer -1",)),
        ("a head given as strings", string_pair, ("heads", "'18'")),
        ("q: 5 with 4 heads listed", q_five, ("Q=5",)),
        ("m: 0", m_zero, ("M",)),
        ("another format version", other_format, ("format",)),
        ("an unknown key", unknown_key, ("layers_used",)),
        ("no model_signature", no_signature, ("model_signature",)),
    )
    out = []
    for label, change, says in cases:
        out.append(Call(f"{n}: a head artifact with {label}", n,
                        # the default binds this case's artifact, written once when the cases are listed
                        lambda p=_tampered_heads(tmp, change.__name__, change): F(artifact=p, top_m=2,  # noqa: B008
                                                                                   device="cpu",
                                                                                   max_context_tokens=4096).warm_up(),
                        says=says))
    return out


if __name__ == "__main__":  # a quick look: python bench/bad_input_cases/component_cases.py [filter ...]
    import sys
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    with tempfile.TemporaryDirectory() as folder:
        for r in run(Path(folder), sys.argv[1:] or None):
            print(f"[{r['class']}] {r['input']} -> {r['outcome'][:200]} {r['observed']}")
    print(json.dumps({}))
