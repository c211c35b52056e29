"""The arms of ``icr2 reproduce icr2-fine-tuning`` as data: ICR2 Table 3's rows (``ARMS``: pipeline, context type,
the weights each needs, ICR2's figure for it), the registered comparisons (``REFERENCES``, ``CLAIM_ARMS``, ``PAIRS``),
the registered questions (shipped id files), the recipes, each arm's pipeline with its weights filled in
(``arm_pipeline``) and where a folder of weights holds them (``find_weights``). The experiment is
``icr2_fine_tuning``; its training step ``icr2_fine_tuning_training``; its tables and plot
``icr2_fine_tuning_report``.

Usage example:
```python
from icr2_components.evaluation.experiments.icr2_fine_tuning_arms import ARMS, arm_pipeline

sft_da = next(a for a in ARMS if a.name == "sft_da")
print(sft_da.weights(), arm_pipeline(sft_da, {"sft_da": "/path/to/adapter"})["components"]["reader"])
```
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

BASE_READER = "smollm2-135m-instruct"
PAPER_MODEL = "Mistral-7B"
PAPER_SOURCE = "Table 3 (ICR2 NQ column)"
#: the corpus in context of every arm (preregistration "Context every arm gets")
BUDGET_PASSAGES = 6
RETRIEVERS = ("bm25", "dense", "hybrid")
TOP_K = 50
INDEX = "kilt-sample"
CORPUS_SEED = 0
TRAIN_QUESTIONS, DEV_QUESTIONS, PROBE_QUESTIONS = 1000, 100, 100
ANSWER_FILE = "answers.jsonl.gz"  # an arm's answer cache (an older plain answers.jsonl is read as well)


@dataclass(frozen=True)
class Arm:
    """One row of the table: ``pipeline`` (its name, as the committed answers carry it) under ``context_type``;
    ``adapter``: the fine-tuned reader it answers with (None: the base reader); ``selector``: ``rethead`` (the
    trained head keeps 2 passages) or ``rap`` (4 heads probed on its reader keep their top passage each)."""

    name: str
    label: str  # ICR2 Table 3's row
    pipeline: str
    context_type: str
    adapter: str | None = None
    selector: str | None = None
    max_new_tokens: int = 32
    paper: float | None = None  # ICR2 Table 3, Mistral-7B, ICR2 NQ

    def weights(self) -> list[str]:
        """The weights it needs beyond the base reader, as named in an adapters folder."""
        needed = [self.adapter] if self.adapter else []
        if self.selector == "rethead":
            needed.append("rethead")
        elif self.selector == "rap":
            needed.append(f"rap_heads_{self.adapter}.json")
        return needed


ARMS: tuple[Arm, ...] = (
    Arm("closed_book", "closed-book", "closed_book", "open", paper=0.49),
    Arm("vanilla_rag", "vanilla RAG (own top-3 retrieval)", "vanilla_rag", "open"),
    Arm("untrained", "Vanilla RAG (untrained reader)", "untrained", "corpus", paper=0.53),
    Arm("sft_da", "SFT-DA", "sft_da", "corpus", adapter="sft_da", paper=0.59),
    Arm("sft_rta", "SFT-RTA", "sft_rta", "corpus", adapter="sft_rta", max_new_tokens=256, paper=0.60),
    Arm("sft_cci", "SFT-CCI", "sft_cci", "corpus", adapter="sft_cci", max_new_tokens=64, paper=0.63),
    Arm("rethead", "RetHead (L_gen + L_ret)", "rethead", "corpus", selector="rethead", paper=0.48),
    Arm("sft_da_rap", "SFT-DA + RAP", "sft_da_rap", "corpus", adapter="sft_da", selector="rap", paper=0.64),
    Arm("sft_rta_rap", "SFT-RTA + RAP", "sft_rta_rap", "corpus", adapter="sft_rta", selector="rap",
        max_new_tokens=256, paper=0.63),
    Arm("oracle", "oracle (gold passage)", "untrained", "gold", paper=0.83),
    Arm("sft_da_gold_only", "SFT-DA, gold-only training", "sft_da_gold_only", "corpus", adapter="sft_da_gold_only"),
)
#: the references of the registered comparisons, the claim's arms and the registered pairs (preregistration.md)
REFERENCES = ("vanilla_rag", "untrained")
CLAIM_ARMS = ("sft_da", "sft_rta", "sft_cci", "rethead", "sft_da_rap", "sft_rta_rap")
PAIRS = (("sft_rta", "sft_da"), ("sft_cci", "sft_da"), ("sft_da_rap", "sft_da"), ("sft_rta_rap", "sft_rta"),
         ("sft_da", "sft_da_gold_only"))
#: what each trainable weight's recipe is (resources/training/icr2_table3/NAME.yaml)
RECIPES = ("sft_da", "sft_rta", "sft_cci", "sft_da_gold_only", "rethead")


def _resource(name: str) -> Path:
    return Path(str(files("icr2_components.resources") / "experiments" / name))


def registered_ids(split: str = "eval") -> list[str]:
    """The registered NQ-sample ids of ``split`` (eval, train, dev), in order (shipped with the package)."""
    from icr2_components.evaluation.compare.splits import read_question_ids

    return read_question_ids(_resource(f"icr2_table3_{split}_ids.txt"))


def recipe_file(name: str, folder: str | None = None) -> Path:
    """The recipe of a trainable weight: ``folder/NAME.yaml`` where given, else the registered one."""
    if folder is not None:
        return Path(folder) / f"{name}.yaml"
    return Path(str(files("icr2_components.resources") / "training" / "icr2_table3" / f"{name}.yaml"))


def arm_by_name(name: str) -> Arm:
    return next(a for a in ARMS if a.name == name)


# -- the arms' pipelines -------------------------------------------------------------------------------------------

def arm_pipeline(arm: Arm, weights: dict[str, str], reader: str = BASE_READER) -> dict[str, Any]:
    """The arm's pipeline (as the committed ``bench/icr2_table3/pipelines/`` define it), its weights' paths filled
    in from ``weights`` (weight name -> path)."""
    from icr2_components.evaluation.experiments.retrieval_gate import CLOSED_BOOK_TEMPLATE

    model = weights[arm.adapter] if arm.adapter else reader
    components: dict[str, Any] = {}
    connections: list[dict[str, str]] = []
    metadata: dict[str, Any] = {"technique": arm.label}
    inputs: dict[str, Any] = {}
    outputs: dict[str, str] = {}
    if arm.name == "closed_book":
        components["prompt"] = {"type": "haystack.components.builders.chat_prompt_builder.ChatPromptBuilder",
                                "init_parameters": {"required_variables": ["query"],
                                                    "template": CLOSED_BOOK_TEMPLATE}}
        metadata["role"] = "reference"
        inputs["query"] = "prompt.query"
    else:
        components["prompt"] = {"type": "icr2_components.builders.prompt_builder.CorpusInContextPromptBuilder",
                                "init_parameters": {"task_type": "qa", "query_aware": False}}
        if arm.name == "vanilla_rag":
            components = {"retriever": {"type": "icr2_components.retrievers.index_retriever.IndexRetriever",
                                        "init_parameters": {"index": "kilt-sample", "method": "hybrid", "top_k": 3}},
                          **components}
            connections.append({"sender": "retriever.documents", "receiver": "prompt.documents"})
            metadata["context_input"] = "prompt.documents"
            inputs["query"] = ["retriever.query", "prompt.query"]
            outputs["documents"] = "retriever.documents"
        elif arm.selector is not None:
            if arm.selector == "rethead":
                select = {"type": "icr2_components.rankers.retrieval_head_ranker.RetrievalHeadRanker",
                          "init_parameters": {"head": weights["rethead"], "top_k": 2, "keep_order": True,
                                              "dtype": "bfloat16"}}
            else:
                select = {"type": "icr2_components.filters.retrieval_attention_filter.RetrievalAttentionFilter",
                          "init_parameters": {"artifact": weights[f"rap_heads_{arm.adapter}.json"], "model": model,
                                              "top_m": 1, "num_heads": 4, "dtype": "bfloat16"}}
            components = {"select": select, **components}
            connections.append({"sender": "select.documents", "receiver": "prompt.documents"})
            metadata["context_input"] = "select.documents"
            inputs.update(query=["select.query", "prompt.query"], documents="select.documents")
            outputs["documents"] = "select.documents"
        else:
            metadata["context_input"] = "prompt.documents"
            inputs.update(query="prompt.query", documents="prompt.documents")
    components["reader"] = {"type": "icr2_components.readers.local_chat_reader.LocalChatReader",
                            "init_parameters": {"model": model, "max_new_tokens": arm.max_new_tokens,
                                                "dtype": "bfloat16"}}
    connections.append({"sender": "prompt.prompt", "receiver": "reader.messages"})
    if arm.adapter:  # a fine-tuned reader's reply (a copied passage or a citation before the answer) is parsed
        components["parser"] = {"type": "icr2_components.readers.retrieval_reply_parser.RetrievalReplyParser",
                                "init_parameters": {"match_threshold": 0.5}}
        connections.append({"sender": "reader.replies", "receiver": "parser.replies"})
        outputs = {"replies": "parser.replies", **outputs}
    else:
        outputs = {"replies": "reader.replies", **outputs}
    return {"components": components, "connections": connections, "metadata": metadata, "inputs": inputs,
            "outputs": outputs}


def find_weights(folder: Path, name: str) -> Path | None:
    """A weight in a folder the user gives: an adapter or model (``NAME/adapter``, ``NAME``, ``adapters/NAME``: a
    folder with ``adapter_config.json`` or ``config.json``), the head (``rethead``, ``rethead/retrieval_head``) or a
    probed-heads file (``rap_heads_*.json``)."""
    if name.endswith(".json"):
        path = folder / name
        return path if path.is_file() else None
    for candidate in (folder / name / "adapter", folder / name / "retrieval_head", folder / name,
                      folder / "adapters" / name):
        if (candidate / "adapter_config.json").is_file() or (candidate / "config.json").is_file():
            return candidate
    return None



def sample_questions(ids: set[str]) -> dict[str, tuple[str, list[str]]]:
    """The bundled NQ sample's question text and accepted answers of ``ids``."""
    from icr2_components.kilt import build_sample
    from icr2_components.kilt.tasks import read_kilt_tasks

    return {t.id: (t.input, list(t.answers)) for t in read_kilt_tasks(build_sample().tasks) if t.id in ids}


def build_corpora(path: Path, ids: list[str], progress: bool = True) -> dict[str, Any]:
    """Write the corpus in context of each question of ``ids`` (in sample order) to ``path`` as ICR2 benchmark
    records: its gold passage(s) among confounders pooled from the retrievers over the sample index, cut to
    ``BUDGET_PASSAGES``, shuffled with a per-question seed (the package's ICR2 builder, what ``icr2
    build-benchmark`` runs; the construction of the committed ``bench/icr2_table3`` corpora). Returns its summary."""
    from icr2_components.builders.benchmark import build_icr2_benchmark
    from icr2_components.kilt import build_sample
    from icr2_components.kilt.icr2_benchmark import GoldPassageLookup
    from icr2_components.kilt.tasks import read_kilt_tasks
    from icr2_components.stores import open_index
    from icr2_components.stores.config import corpus_path

    handle = open_index(INDEX)
    wanted = set(ids)
    tasks = [task for task in read_kilt_tasks(build_sample().tasks) if task.id in wanted]
    lookup = GoldPassageLookup.from_knowledge_source(
        corpus_path(handle.config), wikipedia_ids={p.wikipedia_id for task in tasks for p in task.provenance},
        passage_words=handle.config.corpus.passage_words)
    retrieve = {m: (lambda query, k, m=m: handle.retrieve(query, method=m, top_k=k)) for m in RETRIEVERS}
    summary = build_icr2_benchmark(tasks, retrieve, None, lookup, path, budget_passages=BUDGET_PASSAGES, top_k=TOP_K,
                                   seed=CORPUS_SEED, progress=progress)
    return summary.as_dict()


def scaled_steps(registered: int, questions: int, registered_questions: int = TRAIN_QUESTIONS) -> int:
    """A recipe's steps for ``questions`` training questions: its registered steps cover one epoch of
    ``registered_questions``, so a smaller run keeps the epoch (at least one step)."""
    return max(1, math.ceil(registered * min(questions, registered_questions) / registered_questions))


__all__ = [
    "ARMS",
    "BASE_READER",
    "CLAIM_ARMS",
    "PAIRS",
    "PAPER_MODEL",
    "REFERENCES",
    "Arm",
    "arm_by_name",
    "arm_pipeline",
    "build_corpora",
    "find_weights",
    "recipe_file",
    "registered_ids",
    "sample_questions",
    "scaled_steps",
]
