"""ICR2's benchmark comparison (Table 2) and its confounding-ratio effect (section 3.1, figure 1), registered as an
experiment (``icr2 reproduce icr2-benchmark``).

Each question of the bundled NQ sample's evaluation pool (positions 2000 and later, never trained on) gets one
corpus in context per condition, built by the package's ICR2 builder (``build_icr2_benchmark``, what ``icr2
build-benchmark`` runs): its gold passages among confounders up to a token budget (counted with SmolLM2's
tokenizer, the bundled reader's), shuffled. The confounders are pooled from BM25, dense and hybrid retrieval over
the sample index with the question and its answers (ICR2's query), answer-bearing and gold-overlapping passages
left out; the confounding ratio p is the share of them that are retrieved, the rest random passages of the index:
p = 0 is LOFT's random filling, p = 1 ICR2's confounder-aware context. A condition is one (budget, ratio):
``1000tok@p0``, ``4000tok@p1``. The same gold passages appear under every condition, so every comparison is paired.

Answered through ``icr2 compare``'s machinery (``runner.run_curves``): vanilla RAG with the corpus in context
(ICR2's "Vanilla RAG": the CiC prompt of Table 8 over the built corpus, compare's ``corpus`` context type), and the
two references once per question: closed-book (no passages) and oracle (the gold passages alone). The report: answer
match (and exact match) per condition with Wilson intervals; CiC against closed-book and against oracle per
condition (exact McNemar, Holm over the conditions); the confounding effect, the highest ratio against the lowest at
each budget (exact McNemar, Holm over the budgets); the budget curve per ratio (Cochran's Q, smallest against
largest budget); Table 2's NQ columns beside, the paper's models named. The paper's contexts are 32K tokens (about
200 passages); SmolLM2 takes 8,192, so the budgets here are 1,000 and 4,000 tokens (``--set budgets=`` for others;
a budget whose prompt would not fit the model's context is refused with the count).

Usage example:
```python
from icr2_components.evaluation.experiments.runner import run_experiment

report = run_experiment("icr2-benchmark", limit=2, out_dir="runs/icr2", options={"budgets": "300"},
                        max_new_tokens=16, progress=False)
print(report["confounding"]["rows"], report["files"]["html"])
```
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, ClassVar

from icr2_components.errors import UserInputError
from icr2_components.evaluation.experiments.curve import CurveExperiment
from icr2_components.evaluation.experiments.protocol import (
    Condition,
    PaperFigure,
    PreparedData,
    Refusal,
    RunSettings,
    Variant,
    condition_question_id,
    register_experiment,
    split_question_id,
)
from icr2_components.evaluation.metrics.answer_match import answer_match

#: the registered context budgets, in SmolLM2 tokens of the corpus (the paper's is 32K tokens of prompt)
BUDGETS: tuple[int, ...] = (1000, 4000)
#: the registered confounding ratios: 0 = LOFT's random filling, 1 = ICR2's retrieved confounders
RATIOS: tuple[float, ...] = (0.0, 1.0)
RETRIEVERS = ("bm25", "dense", "hybrid")
TOP_K = 100  # candidates per retriever (ICR2: 200 over KILT's 36M passages; the sample index holds 3,717)
FIRST_HELD_OUT_POSITION = 2000  # NQ-sample positions from here on are never trained on (the project's rule)
#: the budget counts each passage's block (ID, title, text) in SmolLM2 tokens; another model's tokenizer may count the
#: same text somewhat longer: the refusal's margin on the budget
TOKENIZER_MARGIN = 0.1
CIC = "cic_vanilla_rag"

#: Table 2, NQ columns: model -> (LOFT, ICR2) for closed-book, vanilla RAG and oracle RAG, as printed
_TABLE_2 = {
    "Qwen-2-1.5B-32K": ((0.21, 0.29), (0.61, 0.35), (0.80, 0.77)),
    "Qwen-2-7B-32K": ((0.31, 0.35), (0.79, 0.57), (0.88, 0.83)),
    "Mistral-2-7B-32K": ((0.46, 0.49), (0.64, 0.53), (0.89, 0.83)),
    "Phi-3-7B-128K": ((0.39, 0.46), (0.76, 0.60), (0.90, 0.87)),
    "LLaMA-3-instruct-8B": ((0.41, 0.44), (0.45, 0.53), (0.81, 0.80)),
    "GPT-4-turbo": ((0.58, 0.61), (0.85, 0.67), (0.88, 0.79)),
}
#: the paper's rows: key -> (label, index into _TABLE_2's triples, benchmark index 0 LOFT / 1 ICR2)
PAPER_ROWS = {
    "closed_book": ("closed-book, ICR2 NQ", 0, 1),
    "closed_book_loft": ("closed-book, LOFT NQ", 0, 0),
    "cic_random": ("vanilla RAG, LOFT NQ (random filling)", 1, 0),
    "cic_confounders": ("vanilla RAG, ICR2 NQ (retrieved confounders)", 1, 1),
    "oracle": ("oracle RAG, ICR2 NQ", 2, 1),
    "oracle_loft": ("oracle RAG, LOFT NQ", 2, 0),
}
_SOURCE = "Table 2 ({} NQ column, 32K tokens)"
#: Table 7's NQ rows: passages per question, CiC prompt tokens, gold passages per question
PAPER_TABLE_7 = {"LOFT NQ": (215, 28911, 1.0), "ICR2 NQ": (202, 20441, 1.0)}


def _paper_figures() -> tuple[PaperFigure, ...]:
    figures = []
    for model, triples in _TABLE_2.items():
        for key, (_, which, bench) in PAPER_ROWS.items():
            figures.append(PaperFigure(model, key, triples[which][bench], _SOURCE.format(("LOFT", "ICR2")[bench])))
    return tuple(figures)


def condition_name(budget: int, ratio: float) -> str:
    return f"{budget}tok@p{ratio:g}"


def parse_condition(name: str) -> tuple[int, float]:
    """``(budget tokens, confounding ratio)`` of a condition's name (``4000tok@p1``)."""
    budget, _, ratio = name.partition("tok@p")
    return int(budget), float(ratio)


def _ratio_group(ratio: float) -> str:
    if ratio == 0:
        return "p = 0: random filling (LOFT)"
    if ratio == 1:
        return "p = 1: retrieved confounders (ICR2)"
    return f"p = {ratio:g}: {ratio:.0%} retrieved, the rest random"


def _numbers(text: str, what: str, kind: type, low: float, high: float | None) -> tuple:
    items = [item.strip() for item in text.split(",") if item.strip()]
    try:
        values = tuple(dict.fromkeys(kind(item) for item in items))
    except ValueError as error:
        raise UserInputError(f"--set {what}={text!r}: not a comma-separated list of numbers ({error}).") from error
    if not values or any(v < low or (high is not None and v > high) for v in values):
        bound = f"in [{low:g}, {high:g}]" if high is not None else f">= {low:g}"
        raise UserInputError(f"--set {what}={text!r}: give one or more values {bound}.")
    return tuple(sorted(values))


def _cell(outcomes: list[bool]) -> dict[str, Any]:
    from icr2_components.evaluation.statistics.proportions import wilson_interval

    n, right = len(outcomes), sum(outcomes)
    if n == 0:
        return {"n": 0, "correct": 0, "accuracy": None, "ci95": None}
    low, high = wilson_interval(right, n)
    return {"n": n, "correct": right, "accuracy": right / n, "ci95": [low, high]}


@register_experiment
class ICR2Benchmark(CurveExperiment):
    name = "icr2-benchmark"
    paper = ("Qiu et al. 2025, \"Eliciting In-context Retrieval and Reasoning for Long-context Large Language "
             "Models\" (ICR2; arXiv:2501.08248), section 3 (Table 2, figure 1, Table 7)")
    title = "closed-book, vanilla RAG with the corpus in context, oracle; random against retrieved confounders"
    claim = ("The paper finds vanilla RAG with the corpus in context above closed-book for most models and well "
             "below the oracle, and lower on ICR2 (confounders retrieved by strong retrievers) than on LOFT "
             "(random filling): Table 2's NQ, GPT-4-turbo 0.61 closed-book, 0.85 LOFT, 0.67 ICR2, 0.79 oracle; "
             "figure 1: performance generally degrades as the confounding ratio rises.")
    questions = (f"the bundled NQ sample's questions from position {FIRST_HELD_OUT_POSITION} on (never trained "
                 "on), in file order, keeping those with an answer and a gold passage in the sample corpus and whose "
                 "corpus could be built under every condition (the rest counted); each condition's corpus built by "
                 f"the ICR2 builder: the gold passages among confounders pooled from {', '.join(RETRIEVERS)} "
                 f"retrieval (top {TOP_K} each, question + answers) over the kilt-sample index, answer-bearing and "
                 "gold-overlapping passages left out, a share 1 - p of random index passages, cut to the budget in "
                 "SmolLM2 tokens and shuffled with a per-question seed.")
    metric = "answer match: an accepted answer, normalised, appears in the reply (best_subspan_em); exact match beside"
    registered_size = 100
    registered_max_new_tokens = 32
    seeds: ClassVar[dict[str, int]] = {"stats_seed": 0, "build_seed": 0}
    paper_figures = _paper_figures()
    paper_notes = (
        "The paper's contexts are 32K tokens (Table 7, NQ: 202 passages and 20,441 prompt tokens on ICR2, 215 and "
        "28,911 on LOFT); SmolLM2 takes 8,192, so the budgets here are 1,000 and 4,000 corpus tokens (about 8 and "
        "30 passages of the sample).",
        "Table 2 contrasts LOFT with ICR2; LOFT's corpus differs from ICR2 with p = 0 in more than its confounders "
        "(its own questions and passages), so its vanilla RAG stands beside p = 0 as the paper's contrast, not the "
        "same setup. Figure 1 (ratios 0-100% on 32K ICR2) is a plot: no numbers are printed for it.",
        "The paper's metric for NQ is exact match after Lee et al. 2024 and Adlakha et al. 2024; answer match "
        "(an accepted answer contained in the reply) is the primary metric here because SmolLM2 answers in "
        "sentences; exact match is reported beside it.",
    )
    figure_title = "accuracy against the context budget per condition, the paper's Table 2 (NQ) beside"
    x_label = "context budget (SmolLM2 tokens of the corpus)"
    options: ClassVar[dict[str, str]] = {
        "budgets": f"comma-separated corpus budgets in SmolLM2 tokens (default {','.join(map(str, BUDGETS))}; "
                   "others are not at the registered size)",
        "ratios": f"comma-separated confounding ratios in [0, 1] (default {','.join(f'{r:g}' for r in RATIOS)}; "
                  "e.g. 0,0.5,1 as figure 1; others are not at the registered size)",
    }

    def __init__(self, index: str = "kilt-sample") -> None:
        self.index = index
        self.budgets: tuple[int, ...] = BUDGETS
        self.ratios: tuple[float, ...] = RATIOS

    def conditions(self) -> list[Condition]:
        return [Condition(condition_name(budget, ratio), _ratio_group(ratio), budget,
                          f"{budget} tokens, p = {ratio:g}")
                for ratio in self.ratios for budget in self.budgets]

    def variants(self) -> list[Variant]:
        return [Variant(CIC, "vanilla RAG with the corpus in context (ICR2's CiC QA prompt, Table 8)")]

    def reference_variants(self) -> list[Variant]:
        return [Variant("closed_book", "closed-book: no passages"),
                Variant("oracle", "oracle RAG: the gold passages alone")]

    def write_pipelines(self, folder: Path) -> list[Path]:
        import yaml

        from icr2_components.resources import shipped_file

        folder.mkdir(parents=True, exist_ok=True)
        # the shipped oracle's prompt and reader, fed with the condition's corpus (compare's `corpus` type)
        data = yaml.safe_load(shipped_file("pipelines", "oracle").read_text())
        data["metadata"] = {"technique": CIC, "context_input": "prompt.documents"}
        path = folder / f"{CIC}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        paths = [path]
        for variant in self.reference_variants():
            reference = folder / f"{variant.name}.yaml"
            reference.write_text(shipped_file("pipelines", variant.name).read_text())
            paths.append(reference)
        return paths

    def refusals(self, conditions, reader, max_new_tokens: int) -> list[Refusal]:
        """A budget whose prompt would not fit: the template's tokens (with one passage block) counted by the
        reader's tokenizer (served: the server's), plus the budget, which counts the passages' blocks in SmolLM2
        tokens, with ``TOKENIZER_MARGIN`` for another tokenizer."""
        from haystack import Document

        from icr2_components.builders.prompt_builder import CorpusInContextPromptBuilder
        from icr2_components.evaluation.experiments.kv_retrieval import prompt_fit

        messages = CorpusInContextPromptBuilder(task_type="qa").run(
            query="who wrote the novel that the film is based on",
            documents=[Document(content="a passage", meta={"title": "a title"})])["prompt"]
        template, limit = prompt_fit(reader, messages, max_new_tokens)
        if template is None or limit is None:
            return []
        refused = []
        for condition in conditions:
            budget, _ = parse_condition(condition.name)
            estimate = template + math.ceil(budget * (1 + TOKENIZER_MARGIN))
            if estimate > limit:
                refused.append(Refusal(condition.name, (
                    f"a {budget}-token corpus makes a prompt of about {estimate} tokens (the template's {template} "
                    f"by the model's tokenizer + the budget in SmolLM2 tokens + {TOKENIZER_MARGIN:.0%} for another "
                    "tokenizer), and the "
                    f"model takes {limit} ({limit + max_new_tokens} context minus max_new_tokens={max_new_tokens})")))
        return refused

    def prepare(self, conditions, limit, folder: Path, progress: bool = True) -> PreparedData:
        from icr2_components.builders.benchmark import build_icr2_benchmark
        from icr2_components.kilt import build_sample
        from icr2_components.kilt.icr2_benchmark import GoldPassageLookup
        from icr2_components.kilt.tasks import read_kilt_tasks
        from icr2_components.stores import open_index
        from icr2_components.stores.config import corpus_path

        size = limit or self.registered_size
        sample = build_sample()  # the bundled sample, where icr2 compare finds it (the shared data folder)
        tasks = list(read_kilt_tasks(sample.tasks))[FIRST_HELD_OUT_POSITION:]
        handle = open_index(self.index)
        lookup = GoldPassageLookup.from_knowledge_source(
            corpus_path(handle.config), wikipedia_ids={p.wikipedia_id for t in tasks for p in t.provenance},
            passage_words=handle.config.corpus.passage_words)
        skipped = {"no answer": 0, "no gold passage in the corpus": 0}
        drawn = []
        for task in tasks:
            if len(drawn) == size:
                break
            if not task.answers:
                skipped["no answer"] += 1
            elif not lookup(task):
                skipped["no gold passage in the corpus"] += 1
            else:
                drawn.append(task)
        memo: dict[tuple[str, str, int], list] = {}

        def retriever(method: str):
            def retrieve(query: str, k: int) -> list:
                key = (method, query, k)
                if key not in memo:  # the same lists serve every condition
                    memo[key] = handle.retrieve(query, method=method, top_k=k)
                return memo[key]
            return retrieve

        retrieve = {method: retriever(method) for method in RETRIEVERS}
        folder.mkdir(parents=True, exist_ok=True)
        built: dict[str, dict[str, dict]] = {}
        summaries = {}
        for condition in conditions:
            budget, ratio = parse_condition(condition.name)
            path = folder / f"{condition.name}.jsonl"
            summary = build_icr2_benchmark(drawn, retrieve, handle.random_documents if ratio < 1 else None, lookup,
                                           path, task_type="qa", budget_tokens=budget, confounding_ratio=ratio,
                                           seed=self.seeds["build_seed"], top_k=TOP_K, progress=progress)
            records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            built[condition.name] = {r["id"]: r for r in records}
            tokens = [r["prompt_tokens"] for r in records if r.get("prompt_tokens") is not None]
            summaries[condition.name] = {
                "written": summary.written, "statistics": summary.statistics,
                "skips": summary.skips.get("counts", {}), "confounders_dropped": summary.dropped,
                "stop_reasons": summary.stop_reasons, "max_prompt_tokens": max(tokens) if tokens else None,
                "random_passages": sum(1 for r in records for c in r["context"] if c["origin"] == "random"),
                "retrieved_confounders": sum(1 for r in records for c in r["context"]
                                             if c["origin"] not in ("random", "gold")),
            }
        ids = [t.id for t in drawn if all(t.id in built[c.name] for c in conditions)]
        conditions_file, references_file = folder / "conditions.jsonl", folder / "references.jsonl"
        with conditions_file.open("w", encoding="utf-8") as out:
            for condition in conditions:
                for question in ids:
                    record = dict(built[condition.name][question], id=condition_question_id(question, condition.name))
                    out.write(json.dumps(record, ensure_ascii=False) + "\n")
        with references_file.open("w", encoding="utf-8") as out:
            first = built[conditions[0].name]
            for question in ids:
                record = first[question]
                gold = set(record["gold_passage_ids"])
                out.write(json.dumps(dict(record, context=[c for c in record["context"] if c["passage_id"] in gold]),
                                     ensure_ascii=False) + "\n")
        drawn_info = {"source": str(sample.tasks), "from_position": FIRST_HELD_OUT_POSITION, "index": self.index,
                      "retrievers": list(RETRIEVERS), "top_k": TOP_K, "asked_for": size, "candidates": len(drawn),
                      "skipped_before_building": skipped,
                      "not_built_under_every_condition": len(drawn) - len(ids), "drawn": len(ids),
                      "conditions": summaries}
        return PreparedData(conditions_file, ids, references_file, drawn_info)

    def score(self, reply: str, answers: list[str]) -> bool:
        return bool(answer_match(reply, answers))

    # -- the run ---------------------------------------------------------------------------------------------

    def run(self, settings: RunSettings) -> dict[str, Any]:
        from icr2_components.evaluation.experiments.runner import run_curves

        custom = {key for key in ("budgets", "ratios") if key in settings.options}
        if "budgets" in settings.options:
            self.budgets = _numbers(settings.options["budgets"], "budgets", int, 1, None)
        if "ratios" in settings.options:
            self.ratios = _numbers(settings.options["ratios"], "ratios", float, 0.0, 1.0)
        if custom:  # the conditions follow the budgets and ratios asked for
            settings.conditions = self.select(settings.conditions_asked)
        scored: dict[str, list[dict]] = {}  # compare's records, scored with the gold of the data now
        report = run_curves(self, settings, scored)
        report["run"]["at_registered_size"] = report["run"]["at_registered_size"] and not custom
        report["run"]["budgets"], report["run"]["ratios"] = list(self.budgets), list(self.ratios)
        return self.add_paired(report, settings, scored)

    def add_paired(self, report: dict[str, Any], settings: RunSettings,
                   scored: dict[str, list[dict]] | None = None) -> dict[str, Any]:
        """Per-question outcomes from the runs' answers (``scored``: compare's records by folder; None: the answer
        caches), then: exact match per cell, CiC against closed-book and against oracle per condition, the highest
        ratio against the lowest per budget (exact McNemar, Holm within each family)."""
        from icr2_components.evaluation.statistics.paired_comparison import holm
        from icr2_components.evaluation.statistics.proportions import paired_outcomes

        complete = report["questions"]["ids"]
        outcomes = _outcomes(settings.out, report["run"]["pipelines"], scored)
        conditions = [Condition(**c) for c in report["conditions"]]
        cic = {c.name: outcomes["answer_match"].get((CIC, c.name), {}) for c in conditions}
        references = {name: outcomes["answer_match"].get((name, ""), {}) for name in ("closed_book", "oracle")}
        exact = []
        for condition in conditions:
            values = outcomes["exact_match"].get((CIC, condition.name), {})
            exact.append({"condition": condition.name, **_cell([values[q] for q in complete if q in values])})
        for name in ("closed_book", "oracle"):
            values = outcomes["exact_match"].get((name, ""), {})
            exact.append({"condition": name, **_cell([values[q] for q in complete if q in values])})

        def family(rows: list[dict]) -> list[dict]:
            for row, adjusted in zip(rows, holm([r["p_value"] for r in rows]), strict=True):
                row["p_holm"] = adjusted
            return rows

        def paired(name: str, a: dict, b: dict, against: str, **extra) -> dict | None:
            common = [q for q in complete if q in a and q in b]
            if not common:
                return None
            result = paired_outcomes([a[q] for q in common], [b[q] for q in common])
            return {"condition": name, "against": against, "n": len(common),
                    "accuracy": sum(a[q] for q in common) / len(common),
                    "accuracy_against": sum(b[q] for q in common) / len(common),
                    "difference": (sum(a[q] for q in common) - sum(b[q] for q in common)) / len(common),
                    "only_condition": result["only_a"], "only_against": result["only_b"],
                    "p_value": float(result["p_value"]), **extra}

        versus = {}
        for reference in ("closed_book", "oracle"):
            rows = [paired(c.name, cic[c.name], references[reference], reference) for c in conditions]
            versus[reference] = family([r for r in rows if r is not None])
        ratios = sorted({parse_condition(c.name)[1] for c in conditions})
        confounding_rows = []
        if len(ratios) >= 2:
            low, high = ratios[0], ratios[-1]
            for budget in sorted({parse_condition(c.name)[0] for c in conditions}):
                names = (condition_name(budget, high), condition_name(budget, low))
                if all(n in cic for n in names):
                    row = paired(names[0], cic[names[0]], cic[names[1]], names[1], budget=budget, high=high, low=low)
                    if row is not None:
                        confounding_rows.append(row)
        report["exact_match"] = exact
        report["versus_references"] = {"test": "exact McNemar", "rows": versus,
                                       "holm_family": "the conditions, per reference"}
        report["confounding"] = {"test": "exact McNemar", "holm_family": "the budgets",
                                 "rows": family(confounding_rows),
                                 "note": "the highest confounding ratio against the lowest at the same budget, on "
                                         "the same questions and gold passages"}
        report["statistics"].update({
            "metric": "answer match (primary) and exact match, 0/1 per answer; an answer with an error scores 0",
            "versus_references": "vanilla RAG with the corpus in context against closed-book and against oracle "
                                 "per condition: exact McNemar on the same questions, Holm over the conditions for "
                                 "each reference",
            "confounding": "highest against lowest confounding ratio at each budget: exact McNemar, Holm over the "
                           "budgets",
            "curves": "per ratio, across the budgets: Cochran's Q; exact McNemar smallest against largest budget",
        })
        return report

    # -- the report ------------------------------------------------------------------------------------------

    def tables(self, report: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
        return icr2_benchmark_tables(report)

    def plot(self, report: dict[str, Any], path: Path) -> Path:
        return plot_icr2_benchmark(report, path)


def _outcomes(out: Path, pipelines: dict[str, dict], scored: dict[str, list[dict]] | None = None
              ) -> dict[str, dict[tuple[str, str], dict[str, bool]]]:
    """``{metric: {(pipeline, condition): {question id: right}}}`` from the run's answers (``compare/`` and
    ``references/``; references have the condition ``""``); failed requests are left out, errors score 0.
    ``scored``: the records compare scored, by folder (``runner.run_curves``: each with the gold of the data now);
    None: the folders' answer caches as written."""
    from icr2_components.evaluation.compare.cache import read_answer_records, resolve_cache_path
    from icr2_components.evaluation.metrics.text_metrics import exact_match

    result: dict[str, dict[tuple[str, str], dict[str, bool]]] = {"answer_match": {}, "exact_match": {}}
    for folder, context_type, members in (("compare", "corpus", (CIC,)),
                                          ("references", "open", ("closed_book", "oracle"))):
        cache = resolve_cache_path(out / folder / "answers.jsonl.gz")  # or an older answers.jsonl
        # per folder: the CiC pipeline is the oracle's prompt and reader, so the two share a hash
        names = {pipelines[name]["hash"]: name for name in members if name in pipelines}
        if scored is not None:
            records = scored.get(folder) or []
        elif cache.is_file():
            records = read_answer_records(cache)
        else:
            continue
        for record in records:
            name = names.get(record["pipeline_hash"])
            if name is None or record["context_type"] != context_type or record.get("failed_request"):
                continue
            question, condition = (split_question_id(record["question_id"]) if context_type == "corpus"
                                   else (record["question_id"], ""))
            reply = "" if record.get("error") else (record.get("answer") or "")
            for metric, scorer in (("answer_match", answer_match), ("exact_match", exact_match)):
                right = bool(reply) and bool(scorer(reply, record["answers"]))
                result[metric].setdefault((name, condition), {})[question] = right
    return result


def _interval(cell: dict | None) -> str:
    if not cell or cell.get("accuracy") is None:
        return "n = 0"
    return f"{cell['accuracy']:.3f} [{cell['ci95'][0]:.2f}-{cell['ci95'][1]:.2f}]"


def _paper_value(report: dict, key: str, model: str) -> float | None:
    return next((f["value"] for f in report["paper"] if f["condition"] == key and f["model"] == model), None)


def _paper_row_key(ratio: float) -> str | None:
    return {0.0: "cic_random", 1.0: "cic_confounders"}.get(ratio)


def icr2_benchmark_tables(report: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
    """The report's tables: Table 2's layout (rows: closed-book, CiC per ratio, oracle; your budgets, then the
    paper's models at 32K), exact match, CiC against the references, the confounding effect, the budget curve,
    the corpora built (Table 7's statistics), the refusals."""
    experiment = report["experiment"]
    cells = {c["condition"]: c for c in report["cells"]}
    budgets = sorted({c["x"] for c in report["conditions"]})
    ratios = sorted({parse_condition(c["name"])[1] for c in report["conditions"]})
    models = list(dict.fromkeys(f["model"] for f in report["paper"]))
    n = report["questions"]["complete"]
    header = ["condition", *[f"yours, {b} tokens [95% CI]" for b in budgets], *[f"{m} (paper)" for m in models]]
    reference = report["references"]

    def paper_cells(key: str | None, loft_key: str | None = None) -> list[str]:
        values = []
        for model in models:
            value = _paper_value(report, key, model) if key else None
            loft = _paper_value(report, loft_key, model) if loft_key else None
            text = "" if value is None else f"{value:.2f}"
            values.append(f"{text} (LOFT {loft:.2f})" if loft is not None else text)
        return values

    rows = [["closed-book (no passages)", *[_interval(reference.get("closed_book")) for _ in budgets],
             *paper_cells("closed_book", "closed_book_loft")]]
    for ratio in ratios:
        rows.append([f"vanilla RAG, corpus in context, {_ratio_group(ratio)}",
                     *[_interval(cells.get(condition_name(b, ratio))) for b in budgets],
                     *paper_cells(_paper_row_key(ratio))])
    rows.append(["oracle RAG (gold passages alone)", *[_interval(reference.get("oracle")) for _ in budgets],
                 *paper_cells("oracle", "oracle_loft")])
    out = [(f"{experiment['metric'].split(':')[0]} beside the paper's Table 2 (NQ)",
            f"Yours: n = {n} questions answered under every condition and by both references (Wilson 95% "
            "intervals); closed-book and oracle do not depend on the budget (the same cell in each column). Paper: "
            f"{experiment['paper']}, exact match at 32K tokens, as printed (another model, other questions: not "
            "tested against); the vanilla RAG row of p = 0 shows LOFT's NQ column, of p = 1 ICR2's; closed-book and "
            "oracle show ICR2's with LOFT's in brackets. An empty paper cell: no such row in the paper.",
            header, rows)]
    exact = {e["condition"]: e for e in report.get("exact_match", [])}
    exact_rows = [["closed-book", _interval(exact.get("closed_book"))], ["oracle", _interval(exact.get("oracle"))]]
    exact_rows[1:1] = [[c["label"], _interval(exact.get(c["name"]))] for c in report["conditions"]]
    out.append(("exact match (the paper's metric), same questions",
                "the normalised reply equals an accepted answer; SmolLM2 answers in sentences, so this is low.",
                ["condition", "exact match [95% CI]"], exact_rows))
    versus_rows = []
    for name, rows_of in report.get("versus_references", {}).get("rows", {}).items():
        for r in rows_of:
            versus_rows.append([r["condition"], name, str(r["n"]), f"{r['accuracy']:.3f}",
                                f"{r['accuracy_against']:.3f}", f"{r['difference']:+.3f}",
                                f"{r['only_condition']} / {r['only_against']}", f"{r['p_value']:.3g}",
                                f"{r['p_holm']:.3g}"])
    out.append(("vanilla RAG with the corpus in context against closed-book and oracle (paired)",
                "answer match on the same questions; exact McNemar, Holm over the conditions for each reference.",
                ["condition", "against", "n", "CiC", "reference", "difference", "only CiC / only reference", "p",
                 "p (Holm)"], versus_rows))
    confounding = report.get("confounding", {})
    out.append(("the confounding effect: high against low confounding ratio at the same budget (paired)",
                f"{confounding.get('note', '')}; exact McNemar, Holm over the budgets. The paper (figure 1, 32K): "
                "performance generally degrades as the ratio rises; Table 2's NQ vanilla RAG falls from LOFT to ICR2 "
                "for five of six models (GPT-4-turbo 0.85 to 0.67).",
                ["budget", "high", "low", "n", "high ratio", "low ratio", "difference", "only high / only low", "p",
                 "p (Holm)"],
                [[str(r["budget"]), f"p = {r['high']:g}", f"p = {r['low']:g}", str(r["n"]), f"{r['accuracy']:.3f}",
                  f"{r['accuracy_against']:.3f}", f"{r['difference']:+.3f}",
                  f"{r['only_condition']} / {r['only_against']}", f"{r['p_value']:.3g}", f"{r['p_holm']:.3g}"]
                 for r in confounding.get("rows", [])]))
    curve_rows = [[c["group"], c["verdict"],
                   *(["", "", ""] if "test" not in c else
                     [f"{c['test']['first_vs_last']['difference']:+.3f}",
                      f"{c['test']['first_vs_last']['p_value']:.3g}",
                      f"Q = {c['test']['across_positions']['statistic']:.1f}, "
                      f"p = {c['test']['across_positions']['p_value']:.3g}"])]
                  for c in report["curves"]]
    out.append(("does the budget matter? (paired, per ratio)",
                "largest minus smallest budget, its exact McNemar p, and Cochran's Q across the budgets.",
                ["ratio", "verdict", "largest - smallest", "McNemar p", "Cochran's Q"], curve_rows))
    built = report["run"].get("drawn", {}).get("conditions", {})
    stats_rows = []
    for condition in report["conditions"]:
        entry = built.get(condition["name"], {})
        stats = entry.get("statistics") or {}
        stats_rows.append([condition["label"], str(entry.get("written", "")),
                           f"{stats['ctx']:.1f}" if stats.get("ctx") is not None else "",
                           f"{stats['tokens']:,.0f}" if stats.get("tokens") is not None else "",
                           f"{stats['prov']:.2f}" if stats.get("prov") is not None else "",
                           str(entry.get("retrieved_confounders", "")), str(entry.get("random_passages", ""))])
    for name, (ctx, tokens, prov) in PAPER_TABLE_7.items():
        stats_rows.append([f"{name} (paper, Table 7)", "", f"{ctx}", f"{tokens:,}", f"{prov:.2f}", "", ""])
    out.append(("the corpora built (Table 7's statistics)",
                "per condition: instances built, passages per question (#CTX), CiC prompt tokens by SmolLM2's "
                "tokenizer (#Tokens), gold passages per question (#Prov), and the retrieved and random passages in "
                "all its corpora.",
                ["condition", "built", "#CTX", "#Tokens", "#Prov", "retrieved confounders", "random passages"],
                stats_rows))
    if report.get("refused"):
        out.append(("conditions refused", "not run, with the reason.", ["condition", "reason"],
                    [[r["condition"], r["reason"]] for r in report["refused"]]))
    return out


def plot_icr2_benchmark(report: dict[str, Any], path: str | Path) -> Path:
    """Two panels: yours, answer match against the budget per confounding ratio with 95% Wilson error bars and
    closed-book and oracle as horizontal bands; the paper's Table 2 NQ per model (closed-book, vanilla RAG on LOFT
    and on ICR2, oracle), each model named."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from icr2_components.plotting import save_figure

    figure, (mine, theirs) = plt.subplots(1, 2, figsize=(13, 5.2))
    colours = plt.get_cmap("tab10").colors
    groups = list(dict.fromkeys(c["group"] for c in report["conditions"]))
    budgets = sorted({c["x"] for c in report["conditions"]})
    for index, group in enumerate(groups):
        shown = [c for c in report["cells"] if c["group"] == group and c["accuracy"] is not None]
        shown.sort(key=lambda c: c["x"])
        if not shown:
            continue
        values = [c["accuracy"] for c in shown]
        errors = [[v - c["ci95"][0] for v, c in zip(values, shown, strict=True)],
                  [c["ci95"][1] - v for v, c in zip(values, shown, strict=True)]]
        nudge = (index - (len(groups) - 1) / 2) * 0.015 * ((max(budgets) - min(budgets)) or max(budgets))
        mine.errorbar([c["x"] + nudge for c in shown], values, yerr=errors, marker="o", capsize=3,
                      color=colours[index % len(colours)], label=f"vanilla RAG (CiC), {group}")
    for name, colour, style in (("closed_book", "grey", ":"), ("oracle", "black", "--")):
        cell = report["references"].get(name)
        if cell and cell.get("accuracy") is not None:
            mine.axhline(cell["accuracy"], color=colour, linestyle=style,
                         label=f"{name.replace('_', '-')} {cell['accuracy']:.2f}")
            mine.axhspan(cell["ci95"][0], cell["ci95"][1], color=colour, alpha=0.08)
    if budgets:
        mine.set_xticks(budgets)
    mine.set(xlabel=report["experiment"]["x_label"], ylabel="answer match", ylim=(-0.02, 1.02))
    mine.set_title(f"yours: {report['run']['backend']}, n = {report['questions']['complete']} NQ questions\n"
                   "error bars and bands: 95% Wilson intervals", fontsize=9)
    keys = ["closed_book", "cic_random", "cic_confounders", "oracle"]
    labels = ["closed-book\n(ICR2 NQ)", "vanilla RAG\nLOFT NQ\n(random)", "vanilla RAG\nICR2 NQ\n(confounders)",
              "oracle\n(ICR2 NQ)"]
    models = list(dict.fromkeys(f["model"] for f in report["paper"]))
    for index, model in enumerate(models):
        values = [_paper_value(report, key, model) for key in keys]
        theirs.plot(range(len(keys)), values, marker="s", linestyle="--", color=colours[(index + 2) % len(colours)],
                    label=model)
    theirs.set_xticks(range(len(keys)))
    theirs.set_xticklabels(labels, fontsize=8)
    theirs.set(ylabel="exact match (paper)", ylim=(-0.02, 1.02))
    theirs.set_title("the paper's Table 2, NQ, 32K tokens (other models, other questions)", fontsize=9)
    for axes in (mine, theirs):
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7, loc="upper left")
    figure.suptitle("ICR2: closed-book, corpus in context at each budget and confounding ratio, oracle", fontsize=10)
    return save_figure(figure, path, tight=True)


__all__ = [
    "BUDGETS",
    "RATIOS",
    "ICR2Benchmark",
    "condition_name",
    "icr2_benchmark_tables",
    "parse_condition",
    "plot_icr2_benchmark",
]
