"""Lost in the Middle's multi-document QA (section 2, figure 5; tables 1 and 5-7), registered as an experiment
(``icr2 reproduce lost-in-the-middle``).

A question is answered from k documents (10, 20, 30): the one passage holding its answer (the gold passage) and
k - 1 distractors, the passages most relevant to the question that hold no accepted answer, in decreasing
relevance; the gold passage is moved to each of the paper's positions (1, 5, 10, ...), the distractors keeping
their order. The paper drew its distractors with Contriever from the whole of Wikipedia; here they are pooled
from BM25 and dense retrieval over the bundled sample's index by ``ConfounderAwareCorpusBuilder`` (answer-bearing
passages and passages overlapping the gold paragraph left out), as ``bench/position_sweep.py`` did before it. The
closed-book and oracle references answer the same questions. The metric is the paper's: an accepted answer,
normalised, appears in the reply (``answer_match``, its ``best_subspan_em``).
"""

from __future__ import annotations

import json
from pathlib import Path

from icr2_components.evaluation.experiments.curve import CurveExperiment
from icr2_components.evaluation.experiments.protocol import (
    Condition,
    PaperFigure,
    PreparedData,
    Variant,
    condition_question_id,
    register_experiment,
)
from icr2_components.evaluation.metrics.answer_match import answer_match

# the gold document's 1-based positions in figure 5 and tables 5-7, per document count
PAPER_POSITIONS: dict[int, tuple[int, ...]] = {
    10: (1, 5, 10),
    20: (1, 5, 10, 15, 20),
    30: (1, 5, 10, 15, 20, 25, 30),
}
# questions at these positions of the bundled NQ sample and later are never trained on (the project's rule)
FIRST_HELD_OUT_POSITION = 2000
CANDIDATES_PER_RETRIEVER = 60

# (model, {documents: accuracies at PAPER_POSITIONS[documents]}, closed-book, oracle), as printed in the paper
_TABLES = {
    "GPT-3.5-Turbo (16K)": ({10: (0.769, 0.610, 0.625), 20: (0.757, 0.573, 0.541, 0.554, 0.631),
                             30: (0.734, 0.551, 0.505, 0.509, 0.518, 0.549, 0.637)}, 0.560, 0.886),
    "Claude-1.3": ({10: (0.629, 0.583, 0.597), 20: (0.599, 0.559, 0.568, 0.572, 0.601),
                    30: (0.591, 0.551, 0.548, 0.557, 0.564, 0.562, 0.599)}, 0.483, 0.761),
    "MPT-30B-Instruct": ({10: (0.602, 0.562, 0.597), 20: (0.537, 0.518, 0.522, 0.527, 0.563),
                          30: (0.516, 0.513, 0.512, 0.490, 0.496, 0.513, 0.541)}, 0.315, 0.819),
    "LongChat-13B (16K)": ({10: (0.721, 0.589, 0.585), 20: (0.686, 0.574, 0.553, 0.525, 0.550),
                            30: (0.669, 0.548, 0.525, 0.529, 0.522, 0.513, 0.551)}, 0.350, 0.834),
}
_TABLE_OF = {10: "Table 5", 20: "Table 6", 30: "Table 7"}


def _paper_figures() -> tuple[PaperFigure, ...]:
    figures = []
    for model, (curves, closed_book, oracle) in _TABLES.items():
        for documents, values in curves.items():
            figures += [PaperFigure(model, f"{documents}docs@{position}", value, _TABLE_OF[documents])
                        for position, value in zip(PAPER_POSITIONS[documents], values, strict=True)]
        figures += [PaperFigure(model, "closed_book", closed_book, "Table 1"),
                    PaperFigure(model, "oracle", oracle, "Table 1")]
    return tuple(figures)


SEVERAL_GOLD = "several gold passages"
GOLD_LACKS_ANSWER = "gold passage lacks the answer"


def one_needle(task, lookup) -> tuple[list, str | None]:
    """``(gold, None)`` when ``task``'s gold paragraph is one passage holding an accepted answer (one needle, as in
    Lost in the Middle), else ``([], reason)``: :data:`SEVERAL_GOLD` or :data:`GOLD_LACKS_ANSWER`.

    :param task: a KILT task (``answers``, ``provenance``); :param lookup: a ``GoldPassageLookup``."""
    gold = lookup(task)
    if len(gold) != 1:
        return [], SEVERAL_GOLD
    if not answer_match(gold[0].content, task.answers):
        return [], GOLD_LACKS_ANSWER
    return gold, None


def _record(base: str, condition: str, query: str, answers: list[str], documents) -> dict:
    """One ICR2 benchmark record: the documents in the order shown, ids following that order (so an id never hints
    at the gold passage), the gold passage named among them."""
    context = [{"passage_id": f"PSG{i:03d}", "doc_id": d.id, "title": d.meta.get("title", ""), "text": d.content,
                "origin": d.meta.get("origin", "")} for i, d in enumerate(documents, start=1)]
    gold = [c["passage_id"] for c in context if c["origin"] == "gold"]
    return {"id": condition_question_id(base, condition) if condition else base, "query": query,
            "answers": list(answers), "task_type": "qa", "context": context, "gold_passage_ids": gold}


@register_experiment
class LostInTheMiddle(CurveExperiment):
    name = "lost-in-the-middle"
    paper = ("Liu et al. 2024, \"Lost in the Middle: How Language Models Use Long Contexts\" (TACL; "
             "arXiv:2307.03172), section 2 and figure 5, tables 1 and 5-7")
    title = "multi-document QA: the gold document's position among 10, 20 and 30"
    claim = ("The paper finds a U-shaped curve: accuracy highest with the answer's document first or last, lowest "
             "in the middle (GPT-3.5-Turbo with 20 documents: 75.8% first, 53.8% at position 10, below its "
             "closed-book 56.1%); query-aware contextualization changes the trend little (section 4.2).")
    questions = (f"the bundled NQ sample's questions from position {FIRST_HELD_OUT_POSITION} on (never trained on), "
                 "in file order, keeping those whose gold paragraph is one passage holding an accepted answer and "
                 "that have 29 distractors; distractors from BM25 + dense retrieval over the kilt-sample index "
                 f"(top {CANDIDATES_PER_RETRIEVER} each), pooled by ConfounderAwareCorpusBuilder, answer-bearing "
                 "and gold-overlapping passages left out, in relevance order; k documents = the gold passage and "
                 "the first k - 1 distractors.")
    metric = "accuracy: an accepted answer, normalised, appears in the reply (the paper's best_subspan_em)"
    registered_size = 200
    registered_max_new_tokens = 32
    # the registered run goes by document count, each count one part (the 30-document part alone takes days)
    registered_parts = ("10docs@*", "20docs@*", "30docs@*")
    paper_figures = _paper_figures()
    paper_notes = ("GPT-3.5-Turbo (4K) is in tables 5-6 too (76.8/61.2/62.4 at 10 documents) but not at 30; the "
                   "16K model stands for it here.",
                   "Query-aware contextualization on this task (section 4.2) is a plot: no numbers are printed.")
    figure_title = "the paper's figure 5 (tables 5-7)"
    x_label = "position of the document with the answer"

    def __init__(self, index: str = "kilt-sample") -> None:
        self.index = index

    def conditions(self) -> list[Condition]:
        return [Condition(f"{documents}docs@{position}", f"{documents} documents", position,
                          f"{documents} documents, gold at {position}")
                for documents, positions in PAPER_POSITIONS.items() for position in positions]

    def variants(self) -> list[Variant]:
        return [Variant("multi_document_qa", "the documents, then the question (ICR2's QA prompt)"),
                Variant("multi_document_qa_query_aware", "query-aware: the question before and after")]

    def reference_variants(self) -> list[Variant]:
        return [Variant("closed_book", "no documents"), Variant("oracle", "the gold passage alone")]

    def write_pipelines(self, folder: Path) -> list[Path]:
        import yaml

        from icr2_components.resources import shipped_file

        folder.mkdir(parents=True, exist_ok=True)
        oracle = yaml.safe_load(shipped_file("pipelines", "oracle").read_text())
        paths = []
        for variant, aware in zip(self.variants(), (False, True), strict=True):
            data = json.loads(json.dumps(oracle))
            data["components"]["prompt"]["init_parameters"]["query_aware"] = aware
            data["metadata"] = {"technique": variant.name, "context_input": "prompt.documents"}
            path = folder / f"{variant.name}.yaml"
            path.write_text(yaml.safe_dump(data, sort_keys=False))
            paths.append(path)
        for variant in self.reference_variants():
            path = folder / f"{variant.name}.yaml"
            path.write_text(shipped_file("pipelines", variant.name).read_text())
            paths.append(path)
        return paths

    def prepare(self, conditions, limit, folder: Path, progress: bool = True) -> PreparedData:
        from tqdm.auto import tqdm

        from icr2_components.builders import ConfounderAwareCorpusBuilder
        from icr2_components.kilt import build_sample
        from icr2_components.kilt.icr2_benchmark import GoldPassageLookup
        from icr2_components.kilt.tasks import read_kilt_tasks
        from icr2_components.reorderers import GoldAtPositionReorderer
        from icr2_components.stores import open_index
        from icr2_components.stores.config import corpus_path

        size = limit or self.registered_size
        # the registered question set and distractors whatever subset is asked: a run on some conditions is then a
        # part of the registered run, its cached answers reused by the whole (the same questions, the same prompts)
        most = max(PAPER_POSITIONS)
        sample = build_sample()
        tasks = list(read_kilt_tasks(sample.tasks))[FIRST_HELD_OUT_POSITION:]
        handle = open_index(self.index)
        lookup = GoldPassageLookup.from_knowledge_source(
            corpus_path(handle.config), wikipedia_ids={p.wikipedia_id for t in tasks for p in t.provenance},
            passage_words=handle.config.corpus.passage_words)
        builder = ConfounderAwareCorpusBuilder(retrievers=["bm25", "dense"], budget_passages=most, shuffle=False)
        reorderer = GoldAtPositionReorderer()
        skipped = {SEVERAL_GOLD: 0, GOLD_LACKS_ANSWER: 0, f"fewer than {most - 1} distractors": 0}
        folder.mkdir(parents=True, exist_ok=True)
        path, references = folder / "conditions.jsonl", folder / "references.jsonl"
        ids: list[str] = []
        with path.open("w", encoding="utf-8") as out, references.open("w", encoding="utf-8") as refs, \
                tqdm(total=size, desc="drawing questions", unit=" questions", disable=not progress) as bar:
            for task in tasks:
                if len(ids) == size:
                    break
                gold, reason = one_needle(task, lookup)
                if reason:
                    skipped[reason] += 1
                    continue
                lists = {method: handle.retrieve(task.input, method, CANDIDATES_PER_RETRIEVER)
                         for method in ("bm25", "dense")}
                pooled = builder.run(query=task.input, answers=task.answers, gold_documents=gold,
                                     provenance=[vars(p) for p in task.provenance], **lists)["documents"]
                distractors = [d for d in pooled if d.meta.get("origin") != "gold"]
                if len(distractors) < most - 1:
                    skipped[f"fewer than {most - 1} distractors"] += 1
                    continue
                gold_document = next(d for d in pooled if d.meta.get("origin") == "gold")
                for condition in conditions:
                    documents = int(condition.name.split("docs@")[0])
                    corpus = [gold_document, *distractors[:documents - 1]]
                    ordered = reorderer.run(documents=corpus, position=condition.x)["documents"]
                    out.write(json.dumps(_record(task.id, condition.name, task.input, task.answers, ordered),
                                         ensure_ascii=False) + "\n")
                refs.write(json.dumps(_record(task.id, "", task.input, task.answers, [gold_document]),
                                      ensure_ascii=False) + "\n")
                ids.append(task.id)
                bar.update(1)
        drawn = {"source": str(sample.tasks), "from_position": FIRST_HELD_OUT_POSITION, "index": self.index,
                 "skipped": skipped, "drawn": len(ids), "asked_for": size}
        return PreparedData(path, ids, references, drawn)

    def score(self, reply: str, answers: list[str]) -> bool:
        return bool(answer_match(reply, answers))
