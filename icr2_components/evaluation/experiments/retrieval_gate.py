"""RetrievalQA's adaptive-retrieval evaluation (Zhang et al. 2024, tables 1 and 10), registered as an experiment
(``icr2 reproduce retrieval-gate``): each gate method's retrieval rate against the accuracy it buys, on labelled
questions, with the user's reader.

The run, in ``out_dir``:

1. ``data/``: the questions with their passages. By default the project's held-apart gate set (the set
   ``bench/gate_tradeoff.sh eval`` reported on): the first 200 held-out NQ-sample ids, with the kilt-sample
   index's top 3 hybrid passages (what ``pipelines/adaptive_rag.yaml`` retrieves), and the 53 RetrievalQA-style
   questions written for the project (new-world, long-tail, answerable; their own one-sentence contexts, the index's
   passages for the answerable ones), both shipped in the package (``resources/gates/``). ``--set questions=FILE``
   takes a RetrievalQA-format JSONL (``question``, ``ground_truth``, ``context``, ``needs_retrieval`` or
   ``param_knowledge_answerable``, ``data_source``: RetrievalQA's own release reads as it is) or a label file of
   ``icr2 label-retrieval-need`` (its passages are reused).
2. ``compare/``: the reader answers every question twice through :func:`run_compare` (answer cache, resume,
   concurrency against a server): closed-book (RetrievalQA Fig. 7) and with the passages (Fig. 8), under compare's
   ``open`` context type (the passages given as the question's gold documents). A gate's answer is whichever of the
   two its decision picks, so every method is scored on the same generations, as the paper does.
   ``--set answers_from=LABELS`` seeds that cache from a label file of ``icr2 label-retrieval-need`` made by the
   same reader and budget on the same passages (the same prompts): the registered run on the bundled reader reuses
   the project's committed labels (``bench/results/gate_labels/heldout200_gate_eval.jsonl``) this way, and
   ``--set decisions_from=TRADEOFF_JSON`` the decisions of an ``icr2 eval-gate --labels`` run of the same
   in-process model and date for the methods that read no artifact (vanilla, TA-ARE).
3. The need label of a question (RetrievalQA A.2): the file's own (``needs_retrieval``) where every question
   carries one, else this reader's (``needs retrieval`` = wrong closed-book and right with the passages; both wrong
   = no need; ``evaluation.gates.need_labels``), as the project's labels are made.
4. ``gates/decisions.jsonl``: every gate method (``evaluation.gates.gate_methods``) decides for every question,
   asking the same model as the reader (a served backend's model over its API: P(yes) from its top
   log-probabilities, as ``bench/gate_served.py`` measured), cached per method, model, date and question.
5. The report: per method the retrieval rate, the accuracy (answer match of the chosen answer) and RetrievalQA's
   retrieval accuracy with 95% Wilson intervals, macro precision / recall / F1 of the decisions (Table 10), the
   same on the questions that need retrieval (Table 1's setting), exact McNemar against always-retrieve and against
   TA-ARE (Holm across the methods), the AUROC of each score and the objective (answer match - lambda x retrieval
   rate) with the reference-gate comparisons of ``gate_tradeoff.compare_methods``, and the trade-off plot beside
   the paper's Table 1 points with its models named.
"""

from __future__ import annotations

import hashlib
import json
from importlib.resources import files
from pathlib import Path
from typing import Any, ClassVar

from icr2_components.errors import UserInputError
from icr2_components.evaluation.experiments.protocol import (
    Condition,
    Experiment,
    PaperFigure,
    RunSettings,
    Variant,
    register_experiment,
)
from icr2_components.evaluation.metrics.answer_match import answer_match

#: the registered gate methods (``icr2 eval-gate --methods`` syntax), by display name
DEFAULT_METHODS = {
    "always": "always",
    "never": "never",
    "vanilla": "vanilla",
    "ta_are": "ta_are",
    "threshold": "threshold=adaptive_rag.threshold",
    "learned_knn": "learned=adaptive_rag.learned",
}
METHOD_LABELS = {
    "always": "always retrieve",
    "never": "never retrieve",
    "vanilla": "vanilla prompt (Fig. 5), P(yes) >= 0.5",
    "ta_are": "TA-ARE (Fig. 6: date + 4 demonstrations), P(yes) >= 0.5",
    "threshold": "threshold: vanilla P(yes) >= the cut calibrated on the project's dev labels",
    "learned_knn": "learned: the shipped knn gate (question embedding, trained on the project's dev labels)",
}
REGISTERED_TODAY = "2025-12-01"  # the date in TA-ARE's prompt of the project's gate runs (bench/gate_tradeoff.sh)
REGISTERED_COST = 0.1
INDEX = "kilt-sample"
MAX_PASSAGES = 3
RETRIEVAL_METHOD = "hybrid"
NEED_SOURCES = ("auto", "file", "reader")
DECISION_CHUNK = 32  # questions a gate decides between two writes of the decisions cache

_CLOSED_BOOK = "closed_book"
_WITH_CONTEXT = "with_context"

# --- the paper's figures (RetrievalQA, arXiv:2402.16457), in percent as printed -----------------------------------
# Table 1: the 1,271 questions that need retrieval: (retrieval rate, match); always-retrieve match; Table 6: match
# without retrieval on the same questions. GPT-4* on 250 of them.
_TABLE1 = {
    "TinyLlama (1.1B)": {"vanilla": (39.1, 14.7), "ta_are": (54.1, 19.0), "always": 28.2, "never": 4.2},
    "Phi-2 (2.7B)": {"vanilla": (94.1, 35.0), "ta_are": (95.5, 36.0), "always": 36.4, "never": 7.2},
    "Llama-2 (7B)": {"vanilla": (80.3, 26.1), "ta_are": (86.0, 30.7), "always": 36.0, "never": 2.0},
    "GPT-3.5": {"vanilla": (49.3, 20.8), "ta_are": (86.3, 35.8), "always": 38.2, "never": 1.2},
    "GPT-4*": {"vanilla": (67.6, 37.6), "ta_are": (83.2, 46.4), "always": 46.0, "never": 2.4},
}
# Self-RAG (7B), calibration-based: threshold t -> (retrieval rate, match) on the 1,271 (Table 1); Table 6 no retrieval
_SELF_RAG_TABLE1 = {"0.25": (100.0, 31.9), "0.5": (23.0, 10.6), "0.75": (0.0, 6.0), "None": (0.4, 6.0)}
_SELF_RAG_ALWAYS, _SELF_RAG_NEVER = 31.9, 6.0
# Table 10: all 2,785 questions (1,271 need retrieval, 1,514 do not): (match, retrieval accuracy, precision, recall,
# F1); no-retrieval and always-retrieval match per model. GPT-4* on 500 of them.
_TABLE10 = {
    "TinyLlama (1.1B)": {"never": 49.8, "always": 59.9, "vanilla": (54.4, 49.3, 48.5, 48.4, 48.5),
                         "ta_are": (56.1, 44.7, 45.4, 45.3, 45.4)},
    "Phi-2 (2.7B)": {"never": 51.0, "always": 65.7, "vanilla": (64.9, 48.0, 51.7, 55.8, 53.7),
                     "ta_are": (65.6, 54.1, 57.4, 66.8, 61.8)},
    "Llama-2 (7B)": {"never": 49.7, "always": 65.8, "vanilla": (60.4, 44.3, 47.2, 45.0, 46.1),
                     "ta_are": (63.3, 44.3, 47.6, 44.2, 45.8)},
    "GPT-3.5": {"never": 50.1, "always": 65.7, "vanilla": (58.7, 61.3, 60.3, 60.9, 60.6),
                "ta_are": (65.3, 67.1, 68.6, 70.6, 69.6)},
    "GPT-4*": {"never": 45.4, "always": 64.2, "vanilla": (64.4, 76.0, 76.0, 76.8, 76.4),
               "ta_are": (67.6, 76.6, 76.6, 77.1, 76.8)},
}
_SELF_RAG_TABLE10 = {"0.25": (64.3, 45.6, 50.0, 22.8, 31.3), "0.5": (53.2, 53.6, 51.2, 51.7, 51.5),
                     "0.75": (50.7, 54.4, 50.0, 27.2, 35.2), "None": (49.3, 54.5, 50.1, 62.9, 55.8)}
_SELF_RAG_TABLE10_NEVER, _SELF_RAG_TABLE10_ALWAYS = 50.7, 64.3
_DECISION_FIELDS = ("match", "retrieval_accuracy", "precision", "recall", "f1")
SELF_RAG = "Self-RAG (7B)"
SELF_RAG_SHOWN = "0.5"  # the threshold of the paper's figure 1, shown beside the calibrated threshold


def _paper_figures() -> tuple[PaperFigure, ...]:
    figures: list[PaperFigure] = []
    for model, rows in _TABLE1.items():
        for method in ("vanilla", "ta_are"):
            rate, match = rows[method]
            figures += [PaperFigure(model, f"need:{method}:retrieval_rate", rate / 100, "Table 1"),
                        PaperFigure(model, f"need:{method}:match", match / 100, "Table 1")]
        figures += [PaperFigure(model, "need:always:match", rows["always"] / 100, "Table 1"),
                    PaperFigure(model, "need:never:match", rows["never"] / 100, "Table 6")]
    for threshold, (rate, match) in _SELF_RAG_TABLE1.items():
        figures += [PaperFigure(SELF_RAG, f"need:threshold@{threshold}:retrieval_rate", rate / 100, "Table 1"),
                    PaperFigure(SELF_RAG, f"need:threshold@{threshold}:match", match / 100, "Table 1")]
    figures += [PaperFigure(SELF_RAG, "need:always:match", _SELF_RAG_ALWAYS / 100, "Table 1"),
                PaperFigure(SELF_RAG, "need:never:match", _SELF_RAG_NEVER / 100, "Table 6")]
    for model, rows in _TABLE10.items():
        figures += [PaperFigure(model, "all:never:match", rows["never"] / 100, "Table 10"),
                    PaperFigure(model, "all:always:match", rows["always"] / 100, "Table 10")]
        for method in ("vanilla", "ta_are"):
            figures += [PaperFigure(model, f"all:{method}:{name}", value / 100, "Table 10")
                        for name, value in zip(_DECISION_FIELDS, rows[method], strict=True)]
    for threshold, values in _SELF_RAG_TABLE10.items():
        figures += [PaperFigure(SELF_RAG, f"all:threshold@{threshold}:{name}", value / 100, "Table 10")
                    for name, value in zip(_DECISION_FIELDS, values, strict=True)]
    figures += [PaperFigure(SELF_RAG, "all:never:match", _SELF_RAG_TABLE10_NEVER / 100, "Table 10"),
                PaperFigure(SELF_RAG, "all:always:match", _SELF_RAG_TABLE10_ALWAYS / 100, "Table 10")]
    return tuple(figures)


CLOSED_BOOK_TEMPLATE = (
    '{% message role="user" %}\n'
    "Please use your own knowledge to answer the questions. Only include the answer in your response and try to be "
    "concise. If you do not know the answer, just say \"I don't know\".\n\nQuestion: {{ query }}\n\nAnswer:\n"
    "{% endmessage %}"
)
"""RetrievalQA Fig. 7 (``gate_eval.CLOSED_BOOK_QA_TEMPLATE``) as the pipeline's chat template."""

WITH_CONTEXT_TEMPLATE = (
    '{% message role="user" %}\n'
    "Please answer the question based on the provided context. Only include the answer in your response and try to "
    "be concise. If you do not know the answer, just say \"I don't know\".\n\nParagraph:\n\n"
    "{% for document in documents %}{{ document.content }}{% if not loop.last %}\n\n{% endif %}{% endfor %}"
    "\n\nQuestion: {{ query }}\n\nAnswer:\n"
    "{% endmessage %}"
)
"""RetrievalQA Fig. 8 (``gate_eval.CONTEXT_QA_TEMPLATE``): the passages joined by blank lines, as the labels'."""


def _pipeline(template: str, technique: str, reads_passages: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "components": {
            "prompt": {"type": "haystack.components.builders.chat_prompt_builder.ChatPromptBuilder",
                       "init_parameters": {"required_variables": ["query", *(["documents"] if reads_passages
                                                                             else [])],
                                           "template": template}},
            "reader": {"type": "icr2_components.readers.local_chat_reader.LocalChatReader",
                       "init_parameters": {"model": "smollm2-135m-instruct", "max_new_tokens": 24,
                                           "dtype": "float32"}},
        },
        "connections": [{"sender": "prompt.prompt", "receiver": "reader.messages"}],
        "metadata": {"technique": technique},
        "inputs": {"query": "prompt.query"},
        "outputs": {"replies": "reader.replies"},
    }
    if reads_passages:
        data["metadata"].update(context_input="prompt.documents", gold_documents_input="documents")
        data["inputs"]["documents"] = "prompt.documents"
    return data


def _shipped(name: str) -> Path:
    return Path(str(files("icr2_components.resources") / "gates" / name))


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


@register_experiment
class RetrievalGate(Experiment):
    name = "retrieval-gate"
    paper = ("Zhang, Fang and Chen 2024, \"RetrievalQA: Assessing Adaptive Retrieval-Augmented Generation for "
             "Short-form Open-Domain Question Answering\" (ACL Findings; arXiv:2402.16457), tables 1, 6 and 10")
    title = "adaptive retrieval: each gate's retrieval rate against the accuracy it buys"
    claim = ("The paper finds vanilla prompting insufficient to decide when to retrieve (GPT-3.5 retrieves for "
             "49.3% of the questions that need it, match 20.8% against 38.2% always retrieving) and TA-ARE (today's "
             "date and demonstrations in the prompt) better: +14.9 points of retrieval accuracy and +6.7 of match on "
             "average over five models (Table 1); calibration-based Self-RAG swings from 0% to 100% retrieval with "
             "its threshold.")
    questions = ("the project's held-apart gate set: the first 200 held-out NQ-sample ids (the kilt-sample index's "
                 f"top {MAX_PASSAGES} {RETRIEVAL_METHOD} passages) and the 53 RetrievalQA-style questions written "
                 "for the project (new-world, long-tail, answerable; shipped in resources/gates/), in that order; "
                 "or --set questions=FILE (RetrievalQA-format JSONL or a label file of icr2 label-retrieval-need). "
                 "The need label: the file's own where every question has one, else this reader's (wrong "
                 "closed-book and right with the passages).")
    metric = ("accuracy: an accepted answer, normalised, appears in the chosen answer (the paper's match); "
              "retrieval rate; retrieval accuracy and macro P/R/F1 of the decisions against the need labels")
    registered_size = 253
    registered_max_new_tokens = 24
    seeds: ClassVar[dict[str, int]] = {"stats_seed": 0}
    paper_figures = _paper_figures()
    paper_notes = (
        "The paper's questions (RetrievalQA: RealTimeQA, FreshQA, ToolQA, PopQA long-tail, TriviaQA) and passages "
        "(Contriever, Google search) are not these: its figures are shown beside, never tested against.",
        "Table 1 is on the 1,271 questions that need retrieval, where retrieval accuracy equals the retrieval rate; "
        "Table 10 adds 1,514 that GPT-2 answers closed-book. GPT-4* is on 250 (Table 1) and 500 (Table 10) of them.",
        "Self-RAG (7B) is the paper's calibration-based gate (retrieve when its reflection token's probability "
        "passes t); beside this project's threshold gate (the vanilla prompt's P(yes) against a calibrated cut) it "
        "is shown at t = 0.5, the setting of its figure 1, and at every t in the plot.",
        "The paper answers with max_tokens 100; the registered budget here is 24 tokens, the project's labels'.",
    )
    figure_title = "the paper's Table 1 (questions that need retrieval) as retrieval rate against match"
    x_label = "retrieval rate"
    options: ClassVar[dict[str, str]] = {
        "questions": "a RetrievalQA-format JSONL or a label file of icr2 label-retrieval-need (default: the shipped "
                     "held-apart gate set)",
        "methods": "gate methods as icr2 eval-gate --methods takes them (always is added; default "
                   + ",".join(f"{k}:{v}" if k != v else k for k, v in DEFAULT_METHODS.items()) + ")",
        "need": "where the need labels come from: auto (the file's where every question has one, else this "
                "reader's), file, reader",
        "today": f"the date in TA-ARE's prompt (default {REGISTERED_TODAY}; 'now' for today)",
        "cost": f"lambda of the objective answer match - lambda x retrieval rate (default {REGISTERED_COST})",
        "index": f"the index that retrieves passages for questions without context (default {INDEX})",
        "answers_from": "a label file of icr2 label-retrieval-need whose answers stand for this run's where its "
                        "reader, answer budget, question and passages are this run's (they are the same prompts): "
                        "they seed the answer cache instead of being generated again",
        "decisions_from": "the tradeoff.json of an icr2 eval-gate --labels run on the same in-process model and date: "
                          "the decisions of its methods that read no artifact (vanilla, TA-ARE) stand for this run's",
    }

    # -- the protocol ------------------------------------------------------------------------------------------------

    def conditions(self) -> list[Condition]:
        return [Condition(name, "gate", i, METHOD_LABELS[name]) for i, name in enumerate(DEFAULT_METHODS)]

    def variants(self) -> list[Variant]:
        return [Variant(_CLOSED_BOOK, "closed-book (RetrievalQA Fig. 7)"),
                Variant(_WITH_CONTEXT, "with the passages (RetrievalQA Fig. 8)")]

    def score(self, reply: str, answers: list[str]) -> bool:
        return bool(answer_match(reply, answers))

    def write_pipelines(self, folder: Path) -> list[Path]:
        import yaml

        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for name, template, reads in ((_CLOSED_BOOK, CLOSED_BOOK_TEMPLATE, False),
                                      (_WITH_CONTEXT, WITH_CONTEXT_TEMPLATE, True)):
            path = folder / f"{name}.yaml"
            path.write_text(yaml.safe_dump(_pipeline(template, name, reads), sort_keys=False))
            paths.append(path)
        return paths

    # -- questions ---------------------------------------------------------------------------------------------------

    def load_questions(self, source: str | None, limit: int | None, index: str, progress: bool = True
                       ) -> tuple[list[Any], dict[str, bool], dict[str, Any]]:
        """``(questions, file labels by id, how they were drawn)``: NeedQuestions with their passages."""
        from icr2_components.evaluation.compare.splits import read_question_ids
        from icr2_components.evaluation.gates.gate_eval import read_retrievalqa_jsonl
        from icr2_components.evaluation.gates.need_labels import (
            needs_retrieval,
            nq_questions,
            read_label_file,
            retrievalqa_question_id,
            retrievalqa_questions,
        )
        from icr2_components.records import SkipReport
        from icr2_components.records.reading import iter_jsonl

        size = limit or None
        drawn: dict[str, Any] = {}
        file_labels: dict[str, bool] = {}
        if source is None:
            ids = read_question_ids(_shipped("gate_eval_nq_ids.txt"))
            nq, nq_skips = nq_questions(ids[:size] if size else ids, index=index, context="retrieved",
                                        max_passages=MAX_PASSAGES, retrieval_method=RETRIEVAL_METHOD)
            questions = list(nq)
            rest = None if size is None else size - len(questions)
            written = _shipped("gate_eval.jsonl")
            skips: dict[str, Any] = {"nq": nq_skips.as_dict()}
            if rest is None or rest > 0:
                extra, extra_skips = retrievalqa_questions(written, index=index, max_passages=MAX_PASSAGES,
                                                           retrieval_method=RETRIEVAL_METHOD, limit=rest)
                questions += extra
                skips["written"] = extra_skips.as_dict()
            drawn = {"source": "shipped held-apart gate set", "nq_ids": str(_shipped("gate_eval_nq_ids.txt")),
                     "written": str(written), "index": index, "passages": f"top {MAX_PASSAGES} {RETRIEVAL_METHOD}",
                     "skips": skips}
            return questions, file_labels, drawn
        path = Path(source)
        if not path.is_file():
            raise UserInputError(f"--set questions={source}: no such file (a RetrievalQA-format JSONL or a label "
                                 "file of icr2 label-retrieval-need).")
        first = next((raw for _, raw in iter_jsonl(path, SkipReport(source=str(path)))), None)
        if first is None:
            raise UserInputError(f"--set questions={source}: no JSON line in it.")
        if "closed_book_match" in first and "passages" in first:  # a label file: its questions and passages
            from icr2_components.evaluation.gates.need_labels import NeedQuestion

            skips = SkipReport(source=str(path))
            lines = {r["key"]: r for r in read_label_file(path, skips)}
            questions = [NeedQuestion(r["id"], r["question"], list(r["answers"]), r["source"], list(r["passages"]),
                                      r.get("context_kind", "gold")) for r in lines.values() if r.get("passages")]
            questions = questions[:size] if size else questions
            # the file's label is its labelling reader's: used only when asked for (--set need=file)
            file_labels = {r["id"]: needs_retrieval(r["outcome"]) for r in lines.values()}
            drawn = {"source": str(path), "format": "label file", "labelled_by": sorted({r["reader"] for r in
                                                                                         lines.values()}),
                     "skips": skips.as_dict()}
            return questions, {"__labeller__": True, **file_labels}, drawn
        try:
            questions, skips = retrievalqa_questions(path, index=index, max_passages=MAX_PASSAGES,
                                                     retrieval_method=RETRIEVAL_METHOD, limit=size)
        except FileNotFoundError as error:
            raise UserInputError(str(error)) from None
        records, _ = read_retrievalqa_jsonl(path)
        file_labels = {retrievalqa_question_id(path, r.question): r.needs_retrieval for r in records
                       if r.needs_retrieval is not None}
        drawn = {"source": str(path), "format": "RetrievalQA JSONL", "index": index, "skips": skips.as_dict()}
        return questions, file_labels, drawn

    @staticmethod
    def write_icr2(questions: list[Any], path: Path) -> Path:
        """The questions as one ICR2 benchmark file: each question's passages are its context and its gold passages
        (compare's ``open`` gives them to the with-context pipeline)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as out:
            for question in questions:
                context = [{"passage_id": f"P{i}", "doc_id": f"{question.id}#{i}", "title": "", "text": passage,
                            "origin": "gold"} for i, passage in enumerate(question.passages, start=1)]
                out.write(json.dumps({"id": question.id, "query": question.question, "answers": question.answers,
                                      "task_type": "qa", "context": context,
                                      "gold_passage_ids": [c["passage_id"] for c in context],
                                      "source": question.source}, ensure_ascii=False) + "\n")
        return path

    # -- the run -----------------------------------------------------------------------------------------------------

    def method_specs(self, settings: RunSettings) -> list[Any]:
        from icr2_components.evaluation.gates.gate_methods import parse_methods

        given = settings.options.get("methods")
        if given is not None and settings.conditions_asked is not None:
            raise UserInputError("--conditions picks among the registered gate methods; with --set methods=... name "
                                 "the methods there instead.")
        if given is None:
            text = [f"{name}:{DEFAULT_METHODS[name]}" if DEFAULT_METHODS[name] != name else name
                    for name in (c.name for c in settings.conditions)]
        else:
            text = [t.strip() for t in given.split(",") if t.strip()]
        try:
            specs = parse_methods(text)
        except ValueError as error:
            raise UserInputError(f"--set methods: {error}") from None
        if not any(s.name == "always" for s in specs):  # the baseline of every paired test
            specs = parse_methods(["always"]) + specs
        return specs

    def run(self, settings: RunSettings) -> dict[str, Any]:
        from icr2_components.backends.pipelines import request_concurrency
        from icr2_components.evaluation.compare.run import run_compare
        from icr2_components.evaluation.experiments.runner import scored_answers
        from icr2_components.evaluation.gates.gate_methods import check_held_apart, gate_model_settings
        from icr2_components.evaluation.gates.gate_tradeoff import check_cost

        options = settings.options
        need_source = options.get("need", "auto")
        if need_source not in NEED_SOURCES:
            raise UserInputError(f"--set need={need_source}: one of {', '.join(NEED_SOURCES)}.")
        try:
            cost = check_cost(float(options.get("cost", REGISTERED_COST)))
        except ValueError as error:
            raise UserInputError(f"--set cost: {error}") from None
        today = options.get("today", REGISTERED_TODAY)
        today = None if today == "now" else today
        specs = self.method_specs(settings)
        out, backend = settings.out, settings.backend
        questions, file_labels, drawn = self.load_questions(options.get("questions"), settings.limit,
                                                            options.get("index", INDEX), settings.progress)
        labeller = bool(file_labels.pop("__labeller__", False))
        if not questions:
            raise UserInputError(f"{self.name}: no question could be drawn ({drawn}).")
        if need_source == "file" and not all(q.id in file_labels for q in questions):
            missing = sum(1 for q in questions if q.id not in file_labels)
            raise UserInputError(f"--set need=file: {missing} of {len(questions)} questions carry no need label "
                                 "(needs_retrieval or param_knowledge_answerable); use need=reader.")
        use_file = need_source == "file" or (need_source == "auto" and not labeller and bool(questions)
                                             and all(q.id in file_labels for q in questions))
        check_held_apart(specs, [q.id for q in questions])  # before any answer: a trained-on question is refused
        paths = self.write_pipelines(out / "pipelines")
        dataset = self.write_icr2(questions, out / "data" / "questions.jsonl")
        seeded = (self.seed_answers(Path(options["answers_from"]), paths, dataset, backend, settings.max_new_tokens,
                                    out / "compare" / "answers.jsonl.gz") if options.get("answers_from") else None)
        records: list[dict] = []  # scored with the gold of the questions now, not a cached answer's
        answered = run_compare([str(p) for p in paths], dataset=str(dataset), context_types=["open"],
                               out_dir=out / "compare", records_out=records, **settings.compare_settings())
        scores, counts = scored_answers(self, answered, "open", records)
        model, gate_options = gate_model_settings("smollm2-135m-instruct", backend)
        slots = request_concurrency(backend, settings.concurrency)
        complete = [q for q in questions if q.id in scores[_CLOSED_BOOK] and q.id in scores[_WITH_CONTEXT]]
        gate_label = (backend.describe() if backend is not None else f"local:{model}")
        labelled = self.labelled(complete, scores, file_labels if use_file else None, gate_label)
        committed, committed_described = (
            self.committed_decisions(Path(options["decisions_from"]), specs, model, today, backend)
            if options.get("decisions_from") else ({}, None))
        runs, refused, asked = self.decide(specs, labelled, model, gate_options, gate_label, today, slots,
                                           out / "gates", settings.progress, committed)
        report = self.build(labelled, runs, cost, settings.seed)
        report["refused"] = refused
        report["experiment"] = self.describe()
        report["questions"] = {"drawn": len(questions), "complete": len(labelled),
                               "incomplete": len(questions) - len(labelled),
                               "ids": [q.id for q in labelled]}
        report["labels"] = {"source": "the file's" if use_file else "this reader's answers (RetrievalQA A.2)",
                            "needs_retrieval": sum(1 for q in labelled if q.needs_retrieval),
                            "no_need": sum(1 for q in labelled if q.needs_retrieval is False)}
        report["paper"] = [{"model": f.model, "condition": f.condition, "value": f.value, "source": f.source}
                           for f in self.paper_figures]
        report["run"] = {
            "out": str(out),
            "backend": backend.describe() if backend is not None else "pipelines' own (local)",
            "gate_model": gate_label,
            "today": today or "today (at run time)",
            "cost": cost,
            "max_new_tokens": settings.max_new_tokens,
            "reuse_prompt_prefix": settings.reuse_prompt_prefix,
            "limit": settings.limit,
            "registered_size": self.registered_size,
            "at_registered_size": (settings.at_registered_size(self.registered_size)
                                   and not {"questions", "methods"} & set(options)),
            "conditions_asked": settings.conditions_asked,
            "methods": {s.name: {"method": s.method, "artifact": s.artifact} for s in specs},
            "pipelines": answered["run"]["pipelines"],
            "compare_reports": {"answers": answered["files"]["html"]},
            "counters": {"answers": answered["run"]["counters"], "gate_decisions_asked": asked},
            "answers_left_out": counts,
            "answers_seeded": seeded,
            "decisions_seeded": committed_described,
            "drawn": drawn,
            "data": {"questions": str(dataset)},
        }
        return report

    @staticmethod
    def seed_answers(labels: Path, paths: list[Path], dataset: Path, backend: Any, max_new_tokens: int,
                     cache_file: Path) -> dict[str, Any]:
        """Write the answers of a label file of ``icr2 label-retrieval-need`` into compare's answer cache, as
        compare would have written them, where the label's reader and answer budget are this run's and its question
        id and passages are this run's: the labels were answered with these same prompts (RetrievalQA Fig. 7 and
        Fig. 8, ``gate_eval``), so the run reuses them instead of answering again. Keys already answered are kept.
        Returns the counts (seeded, kept, not matching and why)."""
        from icr2_components.evaluation.compare.cache import AnswerCache, cache_key, context_sha
        from icr2_components.evaluation.gates.need_labels import read_label_file
        from icr2_components.kilt.icr2_benchmark import read_icr2_benchmark
        from icr2_components.pipeline_spec import PipelineSpec
        from icr2_components.records import SkipReport

        if not labels.is_file():
            raise UserInputError(f"--set answers_from={labels}: no such file (a label file of icr2 "
                                 "label-retrieval-need).")
        model = "smollm2-135m-instruct"  # the pipelines' reader
        if backend is not None:
            model = backend.kind.local_model() or model
            reader = f"{backend.kind.reader_label(model)}:max_new_tokens={max_new_tokens}"
        else:
            reader = f"local:{model}:max_new_tokens={max_new_tokens}"
        specs = {p.stem: PipelineSpec.from_file(str(p), backend=backend) for p in paths}
        instances = {i.id: i for i in read_icr2_benchmark(dataset)}
        skips = SkipReport(source=str(labels))
        counts = {"file": str(labels), "reader": reader, "seeded": 0, "already_answered": 0, "other_reader": 0,
                  "other_passages": 0, "not_in_this_run": 0}
        cache = AnswerCache(cache_file)
        for label in read_label_file(labels, skips):
            instance = instances.get(label["id"])
            if instance is None:
                counts["not_in_this_run"] += 1
                continue
            if label["reader"] != reader:
                counts["other_reader"] += 1
                continue
            documents = instance.documents()
            if [d.content for d in documents] != label.get("passages"):
                counts["other_passages"] += 1
                continue
            seconds = list(label.get("answer_seconds") or [None, None])
            for name, answer, latency, reads in ((_CLOSED_BOOK, label["closed_book_answer"], seconds[0], False),
                                                 (_WITH_CONTEXT, label["context_answer"], seconds[-1], True)):
                spec = specs[name]
                key = cache_key(spec.hash, instance.id, "open")
                if cache.done(key):
                    counts["already_answered"] += 1
                    continue
                record = {"key": key, "pipeline": spec.name, "pipeline_file": spec.path, "pipeline_hash": spec.hash,
                          "question_id": instance.id, "query": instance.query, "task_type": instance.task_type,
                          "context_type": "open", "answers": instance.answers,
                          "gold_ids": [d.id for d in documents], "conflicting_answer": None,
                          "selects_passages": False, "reads_context": reads}
                if reads:
                    record["context_sha"] = context_sha(documents)
                record.update(answer=answer, shown_ids=[d.id for d in documents] if reads else None,
                              shown_passages=[d.content for d in documents] if reads else None, prompt_tokens=None,
                              latency_s=latency, finish_reason=None, gold_position=1 if reads else None,
                              seeded_from=str(labels))
                cache.add(record)
                counts["seeded"] += 1
        counts["unreadable_lines"] = skips.total
        return counts

    def labelled(self, questions: list[Any], scores: dict[str, dict[str, bool]], file_labels: dict[str, bool] | None,
                 reader: str) -> list[Any]:
        from icr2_components.evaluation.gates.need_labels import LabelledQuestion, needs_retrieval, outcome_of

        result = []
        for q in questions:
            closed, context = scores[_CLOSED_BOOK][q.id], scores[_WITH_CONTEXT][q.id]
            outcome = outcome_of(closed, context)
            label = file_labels[q.id] if file_labels is not None else needs_retrieval(outcome)
            result.append(LabelledQuestion(q.id, q.question, q.source, closed, context, outcome, label, reader))
        return result

    @staticmethod
    def committed_decisions(path: Path, specs: list[Any], model: str | None, today: str | None, backend: Any
                            ) -> tuple[dict[str, dict[str, tuple[bool, float | None, float | None]]], dict[str, Any]]:
        """Decisions of an ``icr2 eval-gate --labels`` run (its ``tradeoff.json``: per question each method's
        decision and score) that stand for this run's: the methods that read no artifact (always, never, vanilla,
        TA-ARE), under the same name, on the same in-process model, date and default demonstration pools.
        Returns ``{method name: {question id: (retrieve, score, cut)}}`` and what was taken or not, and why."""
        from icr2_components.evaluation.gates.gate_methods import parse_methods

        if not path.is_file():
            raise UserInputError(f"--set decisions_from={path}: no such file (the tradeoff.json of icr2 eval-gate "
                                 "--labels --out-dir).")
        try:
            data = json.loads(path.read_text())
            settings, rows, methods = data["settings"], data["rows"], data["all"]["methods"]
        except (ValueError, KeyError, TypeError):
            raise UserInputError(f"--set decisions_from={path}: not the tradeoff.json of icr2 eval-gate --labels.") \
                from None
        theirs = {s.name: s for s in parse_methods(settings["methods"])}
        same_gate = (backend is None and settings.get("backend") is None and settings.get("model") == model
                     and settings.get("today") == today and not settings.get("no_date")
                     and (settings.get("yes_pool"), settings.get("no_pool"), settings.get("n_yes"),
                          settings.get("n_no")) == ("default", "default", 2, 2))
        taken: dict[str, dict[str, tuple[bool, float | None, float | None]]] = {}
        described: dict[str, Any] = {"file": str(path), "taken": {}, "not_taken": {}}
        for spec in specs:
            other = theirs.get(spec.name)
            if not same_gate:
                described["not_taken"][spec.name] = "another model, date, backend or demonstration pools"
            elif other is None or other.method != spec.method:
                described["not_taken"][spec.name] = "no method of that name and kind there"
            elif spec.artifact is not None or other.artifact is not None:
                described["not_taken"][spec.name] = "reads an artifact (it may have been trained again since)"
            else:
                cut = methods.get(spec.name, {}).get("cut")
                taken[spec.name] = {r["id"]: (bool(r[f"{spec.name} retrieve"]), r.get(f"{spec.name} score"), cut)
                                    for r in rows if f"{spec.name} retrieve" in r}
                described["taken"][spec.name] = len(taken[spec.name])
        return taken, described

    def decide(self, specs: list[Any], labelled: list[Any], model: str | None, gate_options: dict[str, Any],
               gate_label: str, today: str | None, slots: int, folder: Path, progress: bool,
               committed: dict[str, dict[str, tuple[bool, float | None, float | None]]] | None = None
               ) -> tuple[dict[str, dict[str, Any]], list[dict[str, str]], dict[str, int]]:
        """Every method's decisions on ``labelled`` (cached in ``folder/decisions.jsonl`` as they come, a chunk of
        questions at a time, so a killed run keeps them; asked only where missing, or taken from ``committed``);
        a method whose decisions carry no score says so in the returned refusals (no curve or AUROC for it); the
        decisions asked this run, per method."""
        from icr2_components.evaluation.compare.cache import AnswerCache
        from icr2_components.evaluation.gates.gate_methods import run_methods

        cache = AnswerCache(folder / "decisions.jsonl")
        runs: dict[str, dict[str, Any]] = {}
        refused: list[dict[str, str]] = []
        asked: dict[str, int] = {}
        for spec in specs:
            def key(question, spec=spec) -> str:
                return (f"{spec.name}|{spec.method}|{spec.artifact}|{gate_label}|today={today}|{question.id}|"
                        f"{_sha(question.question)}")
            given = (committed or {}).get(spec.name, {})
            for question in labelled:
                if question.id in given and not cache.done(key(question)):
                    retrieve, score, cut = given[question.id]
                    cache.add({"key": key(question), "method": spec.name, "question_id": question.id,
                               "retrieve": retrieve, "score": score, "cut": cut, "from": "decisions_from"})
            missing = [q for q in labelled if not cache.done(key(q))]
            asked[spec.name] = len(missing)
            stats: dict[str, Any] = {}
            for start in range(0, len(missing), DECISION_CHUNK):
                chunk = missing[start:start + DECISION_CHUNK]
                ran = run_methods([spec], chunk, model=model, today=today, progress=progress,
                                  gate_options=gate_options, concurrency=slots)[spec.name]
                for name, value in ran["stats"].items():
                    if isinstance(value, (int, float)):
                        stats[name] = stats.get(name, 0) + value
                scores = ran["scores"] or [None] * len(chunk)
                for question, decision, score in zip(chunk, ran["decisions"], scores, strict=True):
                    cache.add({"key": key(question), "method": spec.name, "question_id": question.id,
                               "retrieve": decision, "score": score, "cut": ran["cut"]})
            records = [cache.records[key(q)] for q in labelled]
            fixed = spec.method in ("always", "never")
            values = [r["score"] for r in records]
            unscored = 0 if fixed else sum(1 for v in values if v is None)
            cuts = {r["cut"] for r in records if r.get("cut") is not None}
            runs[spec.name] = {"method": spec.method, "artifact": spec.artifact,
                               "decisions": [bool(r["retrieve"]) for r in records],
                               "scores": None if fixed or unscored else [float(v) for v in values],
                               "unscored": unscored, "cut": cuts.pop() if len(cuts) == 1 else None, "stats": stats}
            if unscored:
                refused.append({"method": spec.name, "reason": f"{unscored} of {len(records)} decisions have no "
                                "P(yes) (a reply parsed instead: the server sent no usable log-probabilities): "
                                "no trade-off curve or AUROC for it"})
            if stats.get("reply_fallbacks"):
                refused.append({"method": spec.name, "reason": f"{stats['reply_fallbacks']} decisions parsed from "
                                "the reply (no usable top log-probabilities): P(yes) is 0 or 1 there"})
        return runs, refused, asked

    def build(self, labelled: list[Any], runs: dict[str, dict[str, Any]], cost: float, seed: int) -> dict[str, Any]:
        """The report's numbers (module doc, step 5)."""
        from icr2_components.evaluation.gates.gate_tradeoff import answer_matches, compare_methods
        from icr2_components.evaluation.gates.retrieval_decisions import score_retrieval_decisions
        from icr2_components.evaluation.statistics.paired_comparison import holm
        from icr2_components.evaluation.statistics.proportions import paired_outcomes, wilson_interval

        def cell(outcomes: list[bool]) -> dict[str, Any]:
            n, right = len(outcomes), sum(bool(o) for o in outcomes)
            if not n:
                return {"n": 0, "value": None, "ci95": None}
            return {"n": n, "value": right / n, "ci95": list(wilson_interval(right, n))}

        labels = [q.needs_retrieval for q in labelled]
        need = [i for i, label in enumerate(labels) if label]
        comparison = compare_methods(runs, labelled, cost, seed=seed, baseline="always") if labelled else None
        methods: dict[str, Any] = {}
        for name, run in runs.items():
            decisions = run["decisions"]
            matches = [bool(m) for m in answer_matches(decisions, labelled)] if labelled else []
            scores = score_retrieval_decisions(decisions, labels).as_dict()
            agree = [d == bool(label) for d, label in zip(decisions, labels, strict=True) if label is not None]
            methods[name] = {
                "method": run["method"], "artifact": run["artifact"], "cut": run["cut"],
                "retrieval_rate": cell(decisions), "accuracy": cell(matches), "retrieval_accuracy": cell(agree),
                "precision": scores["precision"], "recall": scores["recall"], "f1": scores["f1"],
                "need": {"retrieval_rate": cell([decisions[i] for i in need]),
                         "accuracy": cell([matches[i] for i in need])},
                "matches": matches,
            }
        versus = {}
        for baseline in ("always", "ta_are"):
            if baseline not in methods:
                continue
            rows = {}
            for name, entry in methods.items():
                if name == baseline:
                    continue
                result = paired_outcomes(entry["matches"], methods[baseline]["matches"])
                rows[name] = {"difference": (sum(entry["matches"]) - sum(methods[baseline]["matches"]))
                              / max(len(labelled), 1), "only_method": result["only_a"],
                              "only_baseline": result["only_b"], "p_value": float(result["p_value"])}
            adjusted_p = holm([r["p_value"] for r in rows.values()]) if rows else []
            for row, adjusted in zip(rows.values(), adjusted_p, strict=True):
                row["p_holm"] = adjusted
            versus[baseline] = rows
        for entry in methods.values():
            entry.pop("matches")
        return {"methods": methods, "versus": versus, "tradeoff": comparison,
                "statistics": {
                    "intervals": "Wilson 95% for retrieval rate, accuracy and retrieval accuracy (0/1 per question)",
                    "versus": "exact McNemar on accuracy, each method against always-retrieve and against TA-ARE, "
                              "Holm across the methods of each family",
                    "tradeoff": f"objective = answer match - {cost:g} x retrieval rate (BCa bootstrap), AUROC of each "
                                "score against the need labels (bootstrap), against TA-ARE and the vanilla prompt: "
                                "DeLong (AUROC) and sign-flip (objective), Holm (gate_tradeoff.compare_methods)",
                    "decisions": "retrieval accuracy: decisions equal to the need labels; precision, recall: macro "
                                 "over the two classes; F1 their harmonic mean (the paper's Table 10)",
                    "seed": seed,
                    "paper": "the paper's figures are other models on other questions: shown beside, not tested",
                }}

    # -- the report --------------------------------------------------------------------------------------------------

    def tables(self, report: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
        return gate_tables(report)

    def plot(self, report: dict[str, Any], path: Path) -> Path:
        return plot_gate_reproduction(report, path)


def _interval(cell: dict | None) -> str:
    if not cell or cell.get("value") is None:
        return "n = 0"
    return f"{cell['value']:.3f} [{cell['ci95'][0]:.2f}-{cell['ci95'][1]:.2f}]"


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _paper_method(name: str, method: str) -> str | None:
    """The paper's row a method stands beside: its own name for always/never/vanilla/ta_are, Self-RAG's t = 0.5 for
    a threshold gate."""
    if name in ("always", "never", "vanilla", "ta_are"):
        return name
    if method == "threshold":
        return f"threshold@{SELF_RAG_SHOWN}"
    return None


def gate_tables(report: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
    paper = {(f["condition"], f["model"]): f["value"] for f in report["paper"]}
    models = list(dict.fromkeys(f["model"] for f in report["paper"]))
    n = report["questions"]["complete"]
    labels = report["labels"]
    methods = report["methods"]
    out = []
    rows = []
    for name, entry in methods.items():
        def versus(baseline: str, name: str = name) -> str:
            row = report["versus"].get(baseline, {}).get(name)
            if row is None:
                return "baseline" if name == baseline else ""
            return f"{row['difference']:+.3f} ({row['only_method']}/{row['only_baseline']}, p {row['p_holm']:.3g})"
        rows.append([name, "" if entry["cut"] is None else f"{entry['cut']:.3f}", _interval(entry["retrieval_rate"]),
                     _interval(entry["accuracy"]), _interval(entry["retrieval_accuracy"]), _number(entry["precision"]),
                     _number(entry["recall"]), _number(entry["f1"]), versus("always"), versus("ta_are")])
    out.append((f"every gate on the {n} questions",
                f"Yours: n = {n} questions answered closed-book and with their passages ({labels['needs_retrieval']} "
                f"need retrieval by {labels['source']} labels, {labels['no_need']} do not); Wilson 95% intervals. "
                "Accuracy: the chosen answer holds an accepted answer. Δ accuracy: questions right only with the "
                "method / only with the baseline, exact McNemar p with Holm across the methods.",
                ["method", "cut", "retrieval rate", "accuracy", "retrieval accuracy", "precision", "recall", "F1",
                 "Δ accuracy vs always", "Δ accuracy vs TA-ARE"], rows))
    # beside the paper's Table 10 (all questions)
    rows = []
    for name, entry in methods.items():
        row = [name, f"{_number(entry['accuracy']['value'])} / {_number(entry['retrieval_accuracy']['value'])} / "
                     f"{_number(entry['f1'])}"]
        key = _paper_method(name, entry["method"])
        for model in models:
            values = [paper.get((f"all:{key}:{field}", model)) for field in ("match", "retrieval_accuracy", "f1")]
            shown = values if any(v is not None for v in values[1:]) else values[:1]  # never/always: match only
            row.append(" / ".join(_number(v) for v in shown) if key and values[0] is not None else "")
        rows.append(row)
    out.append(("beside the paper's Table 10 (all questions: accuracy / retrieval accuracy / F1)",
                "Paper: RetrievalQA's 2,785 questions (1,271 need retrieval), each model its own gate and reader; "
                f"the threshold row stands beside Self-RAG (7B) at t = {SELF_RAG_SHOWN}; never and always: match only. "
                "Other models on other questions: not tested against.",
                ["method", "yours", *[f"{m} (paper)" for m in models]], rows))
    # the questions that need retrieval: the paper's Table 1
    rows = []
    for name, entry in methods.items():
        need = entry["need"]
        row = [name, _interval(need["retrieval_rate"]), _interval(need["accuracy"])]
        key = _paper_method(name, entry["method"])
        for model in models:
            rate = paper.get((f"need:{key}:retrieval_rate", model))
            match = paper.get((f"need:{key}:match", model))
            rate = 1.0 if key == "always" and match is not None else 0.0 if key == "never" and match is not None \
                else rate
            row.append(f"{_number(rate)} / {_number(match)}" if key and match is not None else "")
        rows.append(row)
    out.append((f"the {labels['needs_retrieval']} questions that need retrieval, beside the paper's Table 1 "
                "(retrieval rate / match)",
                "On questions that need retrieval the retrieval rate is the paper's retrieval accuracy. Paper: the "
                "1,271 questions of RetrievalQA that need retrieval (never: Table 6)."
                + (" With this reader's own labels a question needs retrieval exactly when it is right with the "
                   "passages and wrong without, so here accuracy equals the retrieval rate by construction; the "
                   "paper's labels are the data's." if labels["source"].startswith("this reader") else ""),
                ["method", "retrieval rate (yours)", "accuracy (yours)", *[f"{m} (paper)" for m in models]], rows))
    tradeoff = report.get("tradeoff")
    if tradeoff:
        from icr2_components.evaluation.statistics.intervals import format_interval

        rows = []
        for name, entry in tradeoff["methods"].items():
            comparison = entry.get("vs_always", {}).get("objective")
            rows.append([name, format_interval(entry["auroc"]) if entry["auroc"] else "-",
                         format_interval(entry["objective"]),
                         "baseline" if comparison is None else
                         f"{format_interval(comparison['difference'])} (p {comparison['p_holm']:.3g})"])
        out.append((f"the objective (answer match - {tradeoff['cost']:g} x retrieval rate) and the AUROC of each score",
                    "AUROC: the method's score (P(yes), a learned probability) against the need labels, bootstrap "
                    "95%; objective: BCa bootstrap; against always: sign-flip p, Holm.",
                    ["method", "AUROC", "objective", "Δ objective vs always"], rows))
        pairs = tradeoff.get("versus_references") or []
        if pairs:
            def part(value: dict) -> str:
                if "undefined" in value:
                    return "undefined"
                return f"{format_interval(value['difference'])} (p {value['p_holm']:.3g})"
            out.append(("against the reference gates (TA-ARE, the vanilla prompt)",
                        "Δ AUROC: DeLong's paired test; Δ objective: sign-flip; Holm across the pairs of each.",
                        ["method", "against", "Δ AUROC", "Δ objective"],
                        [[p["method"], p["reference"], part(p["auroc"]), part(p["objective"])] for p in pairs]))
    if report.get("refused"):
        out.append(("what could not be scored", "methods that ran, with what is missing and why.",
                    ["method", "reason"], [[r["method"], r["reason"]] for r in report["refused"]]))
    return out


def plot_gate_reproduction(report: dict[str, Any], path: str | Path) -> Path:
    """Two panels: the user's gates on all questions (retrieval rate against accuracy, Wilson error bars on both,
    every threshold of each scored gate as a line), and the questions that need retrieval beside the paper's Table 1
    (each model's never, vanilla, TA-ARE and always points; Self-RAG's thresholds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from icr2_components.plotting import save_figure

    colours = plt.get_cmap("tab10").colors
    paper_colours = plt.get_cmap("Dark2").colors  # the paper's lines apart from the user's points
    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 5.6))
    methods = report["methods"]
    curves = (report.get("tradeoff") or {}).get("methods", {})

    def point(axes, cell_x, cell_y, colour, label, marker="o") -> None:
        x, y = cell_x["value"], cell_y["value"]
        if x is None or y is None:
            return
        axes.errorbar([x], [y], xerr=[[x - cell_x["ci95"][0]], [cell_x["ci95"][1] - x]],
                      yerr=[[y - cell_y["ci95"][0]], [cell_y["ci95"][1] - y]], fmt=marker, color=colour, capsize=3,
                      markersize=7, label=label)

    for index, (name, entry) in enumerate(methods.items()):
        colour = colours[index % len(colours)]
        curve = curves.get(name, {}).get("curve")
        if curve:
            left.plot([p["retrieval_rate"] for p in curve], [p["answer_match"] for p in curve], "-", color=colour,
                      alpha=0.45, linewidth=1.1)
        point(left, entry["retrieval_rate"], entry["accuracy"], colour,
              f"{name}: {entry['retrieval_rate']['value']:.2f}, {entry['accuracy']['value']:.2f}")
        point(right, entry["need"]["retrieval_rate"], entry["need"]["accuracy"], colour, f"yours: {name}")
    left.set(xlim=(-0.05, 1.05), xlabel="retrieval rate", ylabel="accuracy (answer match)",
             title=f"yours: every gate on {report['questions']['complete']} questions (95% Wilson; lines: every "
                   "threshold of a scored gate)")
    paper = {(f["condition"], f["model"]): f["value"] for f in report["paper"]}
    models = list(dict.fromkeys(f["model"] for f in report["paper"]))
    markers = {"never": "v", "vanilla": "s", "ta_are": "D", "always": "^"}
    for index, model in enumerate(models):
        colour = paper_colours[index % len(paper_colours)]
        if model == SELF_RAG:
            points = sorted((paper[(f"need:threshold@{t}:retrieval_rate", model)],
                             paper[(f"need:threshold@{t}:match", model)]) for t in _SELF_RAG_TABLE1)
            right.plot([x for x, _ in points], [y for _, y in points], ":", marker="x", color="grey",
                       label=f"paper: {model}, t = 0.25/0.5/0.75/None")
            continue
        xs, ys = [], []
        for method in ("never", "vanilla", "ta_are", "always"):
            match = paper.get((f"need:{method}:match", model))
            if match is None:
                continue
            rate = {"never": 0.0, "always": 1.0}.get(method, paper.get((f"need:{method}:retrieval_rate", model)))
            xs.append(rate)
            ys.append(match)
            right.plot([rate], [match], markers[method], color=colour, alpha=0.7, markersize=5)
        right.plot(xs, ys, "--", color=colour, alpha=0.6, linewidth=1, label=f"paper: {model}")
    right.set(xlim=(-0.05, 1.05), xlabel="retrieval rate", ylabel="accuracy (match)",
              title=f"questions that need retrieval ({report['labels']['needs_retrieval']} here) beside the paper's "
                    "Table 1\npaper markers: ▼ never, ■ vanilla, ◆ TA-ARE, ▲ always")
    for axes in (left, right):
        axes.title.set_fontsize(9)
        axes.set_ylim(-0.03, 1.03)
        axes.grid(alpha=0.3)
        axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=7.5, ncol=2, borderaxespad=0.0)
    figure.suptitle(f"retrieval-gate: yours beside RetrievalQA (backend {report['run'].get('backend')})", fontsize=10)
    return save_figure(figure, path, tight=True, dpi=110)


__all__ = [
    "CLOSED_BOOK_TEMPLATE",
    "DEFAULT_METHODS",
    "WITH_CONTEXT_TEMPLATE",
    "RetrievalGate",
    "gate_tables",
    "plot_gate_reproduction",
]
