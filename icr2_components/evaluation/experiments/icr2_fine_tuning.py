"""ICR2's fine-tuning comparison (Table 3), registered as an experiment (``icr2 reproduce icr2-fine-tuning``): the
reader untrained, fine-tuned three ways (SFT-DA: answer directly; SFT-RTA: copy the relevant passage, then answer;
SFT-CCI: cite its id, then answer), with a trained retrieval head (RetHead) and with retrieval attention probing
(RAP) in front, each answering the same held-out NQ questions over the same ICR2 corpus in context, beside
closed-book, vanilla RAG (its own retrieval) and oracle (the gold passage alone).

The arms are data (``ARMS``): each is a pipeline and a context type of ``icr2 compare`` (``corpus``: the question's
corpus in context of 6 passages, gold among confounders from BM25, dense and hybrid retrieval over the sample index;
``gold``: its gold passage; ``open``: none, or the pipeline's own retrieval), and the weights it needs beyond the
base reader (a LoRA adapter, the retrieval head, RAP heads probed on a fine-tuned reader). The registered protocol
is the project's ``bench/data/icr2_table3/preregistration.md``: 426 NQ-sample questions at positions >= 2024
(shipped as ``resources/experiments/icr2_table3_eval_ids.txt``), bf16 greedy, 32 answer tokens (SFT-CCI 64, SFT-RTA
256), the recipes ``resources/training/icr2_table3/ARM.yaml`` (``training/icr2_table3``) on 1,000 training questions
(positions < 2000; ``icr2_table3_train_ids.txt``) with 100 dev questions.

The run, in ``out_dir``:

1. The weights: ``--set adapters=DIR`` names a folder of the user's (``DIR/ARM`` or ``DIR/adapters/ARM`` a LoRA
   adapter or fine-tuned model, ``DIR/rethead`` the head, ``DIR/rap_heads_sft_da.json`` and
   ``DIR/rap_heads_sft_rta.json`` the probed heads: the committed ``bench/results/icr2_table3`` is one); with
   ``--train`` the arms' recipes train them first into ``out/train`` through the package's training entry point
   (what ``icr2 train`` runs; the RAP heads are probed as ``icr2 probe-heads`` does, on training questions). On
   CPU only a tiny run trains in reasonable time (``--limit N`` trains on the first N training questions, the
   steps scaled down); ``--set recipes=DIR`` takes the user's recipes (``DIR/ARM.yaml``, e.g. GPU recipes for a
   large model). An arm whose weights are missing is not run, with the reason; by default only the arms without
   weights run (closed-book, vanilla RAG, the untrained reader, oracle).
2. ``--backend``: the arms without weights answer through the server; an arm that needs an adapter, a retrieval
   head or the model's attention cannot run on a server that serves a plain GGUF and is refused, with the reason.
3. ``arms/ARM``: one ``icr2 compare`` run per arm (``run_compare``: its answer cache, resume, concurrency against a
   server, its report) on ``data/eval.jsonl`` (built only when an answer is missing, by the library function behind
   ``icr2 build-benchmark``). ``--set answers_from=DIR`` first seeds each arm's cache from ``DIR/ARM/answers.jsonl.gz``
   (an earlier run's, e.g. the committed ``bench/results/icr2_table3/arms``), keeping an answer only where its
   question is one of this run's, under the arm's context type and pipeline, with the question's gold answers;
   the rest are generated.
4. The report: per arm n, answer match and exact match with 95% Wilson intervals; each arm against vanilla RAG and
   against the untrained reader (exact McNemar, Holm within each reference's family), the registered pairs (SFT-RTA
   and SFT-CCI against SFT-DA, each RAP arm against its reader, SFT-DA against its gold-only ablation; one Holm
   family), the registered claim (an arm beats both references by >= 0.10, Holm over 6 x 2), all with
   ``evaluation.reports.arms_report``; ICR2 Table 3's figure (Mistral-7B, ICR2 NQ) beside each row, and the plot.

Usage example:
```python
from icr2_components.evaluation.experiments.runner import run_experiment

report = run_experiment("icr2-fine-tuning", limit=2, out_dir="runs/ft", conditions="untrained,sft_da",
                        options={"adapters": "bench/results/icr2_table3"}, progress=False)
print(report["arms"]["sft_da"]["answer_match"], report["not_run"], report["files"]["html"])
```
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

from icr2_components.errors import UserInputError
from icr2_components.evaluation.experiments.icr2_fine_tuning_arms import (
    ANSWER_FILE,
    ARMS,
    BASE_READER,
    BUDGET_PASSAGES,
    CLAIM_ARMS,
    PAIRS,
    PAPER_MODEL,
    PAPER_SOURCE,
    REFERENCES,
    TOP_K,
    Arm,
    arm_by_name,
    arm_pipeline,
    build_corpora,
    find_weights,
    registered_ids,
    sample_questions,
)
from icr2_components.evaluation.experiments.protocol import (
    Condition,
    Experiment,
    PaperFigure,
    RunSettings,
    Variant,
    register_experiment,
)

logger = logging.getLogger(__name__)


@register_experiment
class Icr2FineTuning(Experiment):
    name = "icr2-fine-tuning"
    paper = ("Qiu et al. 2025, \"Eliciting In-context Retrieval and Reasoning for Long-context Large Language "
             "Models\" (ICR2; arXiv:2501.08248), section 4, Table 3")
    title = "fine-tuning the reader for in-context retrieval and reasoning: the arms of Table 3"
    claim = ("The paper finds that fine-tuning a reader on confounder-aware corpora in context pays off over the "
             "untrained reader (Mistral-7B on ICR2 NQ: vanilla RAG 0.53, SFT-DA 0.59, SFT-RTA 0.60, SFT-CCI 0.63), "
             "that retrieval attention probing in front adds to it (SFT-DA + RAP 0.64) and that a jointly trained "
             "retrieval head does not (RetHead 0.48), with oracle at 0.83 and closed-book at 0.49.")
    questions = ("the registered 426 NQ-sample questions at positions >= 2024 in no held-out file, in a seeded order "
                 "(resources/experiments/icr2_table3_eval_ids.txt; the first N with --limit), each with one corpus "
                 f"in context of {BUDGET_PASSAGES} passages: its gold passage(s) among confounders pooled from BM25, "
                 f"dense and hybrid retrieval over the sample index ({TOP_K} candidates each, retrieved with the "
                 "question and its answers, answer-bearing passages left out), shuffled with seed 0. Training: 1,000 "
                 "questions at positions < 2000, dev 100 (positions 2000 and later never train).")
    metric = ("answer match: an accepted answer, normalised, appears in the reply (primary); exact match: the "
              "normalised reply equals one (secondary)")
    registered_size = 426
    registered_max_new_tokens = 32
    seeds: ClassVar[dict[str, int]] = {"stats_seed": 0, "corpus_seed": 0, "question_order_seed": 26}
    paper_figures = tuple(PaperFigure(PAPER_MODEL, a.name, a.paper, PAPER_SOURCE) for a in ARMS
                          if a.paper is not None)
    paper_notes = (
        "ICR2's readers are Mistral-7B (32K context) on corpora of about 200 passages; here SmolLM2-135M-Instruct "
        "reads 6-passage corpora: the figures stand beside, never tested against.",
        "The paper's \"Vanilla RAG\" row is the untrained reader over the corpus in context (the untrained arm); "
        "this project's vanilla_rag arm (the reader over its own top-3 hybrid retrieval) has no Table 3 row, nor "
        "has the gold-only ablation (section 5).",
    )
    figure_title = "answer match per arm, beside ICR2 Table 3 (Mistral-7B)"
    x_label = "arm"
    trains = True
    options: ClassVar[dict[str, str]] = {
        "adapters": "a folder of the arms' weights: ARM or adapters/ARM (a LoRA adapter or fine-tuned model), "
                    "rethead (the retrieval head), rap_heads_sft_da.json / rap_heads_sft_rta.json (probed heads); "
                    "e.g. bench/results/icr2_table3. Default none: the arms without weights only",
        "answers_from": "a folder of earlier answers, ARM/answers.jsonl.gz (icr2 compare caches, e.g. "
                        "bench/results/icr2_table3/arms): each answer to one of this run's questions, under the arm's "
                        "context type and pipeline, with the question's gold answers, seeds the arm's cache",
        "recipes": "with --train: a folder of recipes ARM.yaml to train with instead of the registered ones (e.g. "
                   "GPU recipes for a large model); data and output_dir are the run's",
        "reader": f"the base reader of the arms without weights, in process (default {BASE_READER})",
    }

    def conditions(self) -> list[Condition]:
        return [Condition(a.name, a.context_type, i, a.label) for i, a in enumerate(ARMS, 1)]

    def variants(self) -> list[Variant]:
        return [Variant(name, next(a.label for a in ARMS if a.pipeline == name))
                for name in dict.fromkeys(a.pipeline for a in ARMS)]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "arms": [asdict(a) for a in ARMS], "references_of_tests": list(REFERENCES),
                "claim_arms": list(CLAIM_ARMS), "pairs": [list(p) for p in PAIRS]}

    # -- the run -------------------------------------------------------------------------------------------------

    def run(self, settings: RunSettings) -> dict[str, Any]:
        from icr2_components.backends import BackendError
        from icr2_components.pipeline_spec import PipelineSpec

        options, backend, out = settings.options, settings.backend, settings.out
        registered_budget = settings.max_new_tokens == self.registered_max_new_tokens
        if settings.train and backend is not None:
            raise UserInputError("--train with --backend: the arms train in process, and the server serves a plain "
                                 "GGUF, which cannot load the trained adapters; train without --backend (the "
                                 "arms without weights can then answer through the server in a second run).")
        if settings.train and settings.trainer is None:
            raise UserInputError("--train: no trainer given (run_experiment(trainer=...): a function (recipe file, "
                                 "overrides) -> training summary, e.g. one running training.runner.run_recipe on "
                                 "training.recipe.load_recipe(file, overrides); the CLI passes that one).")
        if settings.train and "adapters" in options:
            raise UserInputError("--train writes the arms' weights into --out/train; --set adapters=DIR evaluates "
                                 "weights you have: give one of the two.")
        if "recipes" in options and not settings.train:
            raise UserInputError("--set recipes=DIR is read only with --train.")
        if "recipes" in options and not Path(options["recipes"]).is_dir():
            raise UserInputError(f"--set recipes={options['recipes']}: no such folder (of recipes ARM.yaml).")
        answers_from = Path(options["answers_from"]) if "answers_from" in options else None
        if answers_from is not None and not answers_from.is_dir():
            raise UserInputError(f"--set answers_from={answers_from}: no such folder (of ARM/answers.jsonl.gz).")
        if answers_from is not None and (not registered_budget or "reader" in options):
            raise UserInputError("--set answers_from: its answers are the arms' at their registered budgets and "
                                 "reader; drop --max-new-tokens and --set reader to seed from them.")
        folder = Path(options["adapters"]) if "adapters" in options else None
        if folder is not None and not folder.is_dir():
            raise UserInputError(f"--set adapters={folder}: no such folder (of the arms' weights).")
        arms = [arm_by_name(c.name) for c in settings.conditions]
        ids = registered_ids("eval")
        ids = ids[:settings.limit] if settings.limit else ids
        trained = None
        if settings.train:
            from icr2_components.evaluation.experiments.icr2_fine_tuning_training import train_arms

            folder = out / "train"
            trained = train_arms(arms, folder, settings.limit, options.get("recipes"), settings.trainer,
                                 settings.progress)
        not_run, kept = [], []
        for arm in arms:
            found = {w: find_weights(folder, w) if folder is not None else None for w in arm.weights()}
            missing = [w for w, path in found.items() if path is None]
            if backend is not None and arm.weights():
                not_run.append({"arm": arm.name, "reason": f"needs {' and '.join(arm.weights())} loaded with the "
                                "model in process (an adapter, a retrieval head or the model's attention); the "
                                "server serves a plain GGUF model: run it without --backend"})
            elif missing:
                not_run.append({"arm": arm.name, "reason": f"no {', '.join(missing)} (give --set adapters=DIR with "
                                "them, or --train)"})
            else:
                kept.append((arm, {w: str(p.resolve()) for w, p in found.items()}))
        pipelines_dir = out / "pipelines"
        pipelines_dir.mkdir(parents=True, exist_ok=True)
        specs = {}
        for arm, weights in list(kept):
            import yaml

            path = pipelines_dir / f"{arm.pipeline}.yaml"
            path.write_text(yaml.safe_dump(arm_pipeline(arm, weights, options.get("reader", BASE_READER)),
                                           sort_keys=False))
            try:  # what compare does first: a component the backend cannot serve is refused, with why
                specs[arm.name] = PipelineSpec.from_file(str(path), backend=backend)
            except BackendError as error:
                not_run.append({"arm": arm.name, "reason": str(error).removeprefix(f"{path}: ")})
                kept.remove((arm, weights))
        if not kept:
            raise UserInputError(f"{self.name}: no arm asked for can run: "
                                 + "; ".join(f"{r['arm']}: {r['reason']}" for r in not_run))
        for refusal in not_run:
            logger.warning("%s: arm %s not run: %s", self.name, refusal["arm"], refusal["reason"])
        seeded = ({arm.name: self.seed_answers(arm, specs[arm.name], answers_from, ids, out) for arm, _ in kept}
                  if answers_from is not None else None)
        compared = self.answer([arm for arm, _ in kept], specs, ids, settings, registered_budget)
        report = self.build(kept, specs, ids, settings)
        report["not_run"] = not_run
        report["run"].update(answers_seeded=seeded, compare_reports=compared["reports"],
                             counters=compared["counters"], data=compared["data"], trained=trained,
                             at_registered_size=(settings.at_registered_size(self.registered_size)
                                                 and registered_budget and "reader" not in options
                                                 and not not_run))
        return report

    def seed_answers(self, arm: Arm, spec: Any, folder: Path, ids: list[str], out: Path) -> dict[str, Any]:
        """Copy the answers of ``folder/ARM/answers.jsonl.gz`` (or ``.jsonl``) that stand for this run's into the
        arm's answer cache, under this run's pipeline (see the module doc, step 3); returns the counts, and why
        answers were left."""
        from icr2_components.evaluation.compare.cache import (
            AnswerCache,
            cache_key,
            read_answer_records,
            resolve_cache_path,
        )

        source = resolve_cache_path(folder / arm.name / ANSWER_FILE)  # answers.jsonl.gz or an older answers.jsonl
        counts = {"file": str(source), "seeded": 0, "already_answered": 0, "not_in_this_run": 0,
                  "other_arm": 0, "other_answers": 0, "other_question": 0, "failed": 0}
        if not source.is_file():
            counts["missing"] = True
            return counts
        wanted = set(ids)
        questions = sample_questions(wanted)
        gold = {question: answers for question, (_, answers) in questions.items()}
        cache = AnswerCache(out / "arms" / arm.name / ANSWER_FILE)
        for record in read_answer_records(source):
            question = record.get("question_id")
            if question not in wanted:
                counts["not_in_this_run"] += 1
            elif record.get("context_type") != arm.context_type or record.get("pipeline") != arm.pipeline:
                counts["other_arm"] += 1
            elif sorted(record.get("answers") or []) != sorted(gold.get(question, [])):
                counts["other_answers"] += 1
            elif isinstance(record.get("query"), str) and record["query"] != questions[question][0]:
                counts["other_question"] += 1  # answered to another wording: asked again, as compare would
            elif record.get("failed_request") or record.get("error"):
                counts["failed"] += 1
            else:
                key = cache_key(spec.hash, question, arm.context_type)
                if cache.done(key):
                    counts["already_answered"] += 1
                    continue
                cache.add({**{k: v for k, v in record.items() if k not in ("record_sha", "replaces")}, "key": key,
                           "pipeline": spec.name, "pipeline_file": spec.path, "pipeline_hash": spec.hash,
                           "seeded_from": str(source)})
                counts["seeded"] += 1
        return counts

    def answer(self, arms: list[Arm], specs: dict[str, Any], ids: list[str], settings: RunSettings,
               registered_budget: bool) -> dict[str, Any]:
        """Each arm's ``icr2 compare`` run where its cache misses an answer; the corpora are built first, once."""
        from icr2_components.evaluation.compare.cache import AnswerCache, cache_key
        from icr2_components.evaluation.compare.run import run_compare

        reports: dict[str, str | None] = {}
        counters: dict[str, Any] = {}
        data = None
        common = settings.compare_settings()
        # at the registered budget every arm keeps its own (SFT-CCI 64, SFT-RTA 256 tokens), as compare passes none
        common["max_new_tokens"] = None if registered_budget else settings.max_new_tokens
        for arm in arms:
            spec = specs[arm.name]
            cache = AnswerCache(settings.out / "arms" / arm.name / ANSWER_FILE, writable=False)
            if all(cache.done(cache_key(spec.hash, q, arm.context_type)) for q in ids):
                reports[arm.name], counters[arm.name] = None, {"model_runs": 0, "from_cache": len(ids)}
                continue
            if data is None:
                data = self.build_corpora(ids, settings.out / "data", settings.progress)
            compared = run_compare([spec.path], dataset=str(data), context_types=[arm.context_type],
                                   question_ids=ids, out_dir=settings.out / "arms" / arm.name, **common)
            reports[arm.name], counters[arm.name] = compared["files"]["html"], compared["run"]["counters"]
        return {"reports": reports, "counters": counters, "data": str(data) if data else None}

    @staticmethod
    def build_corpora(ids: list[str], folder: Path, progress: bool = True) -> Path:
        """``folder/eval.jsonl``: the corpus in context of each question (kept while the questions are the same)."""
        path, stamp = folder / "eval.jsonl", folder / "eval.ids.json"
        if path.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == ids:
            return path
        folder.mkdir(parents=True, exist_ok=True)
        summary = build_corpora(Path(str(path) + ".part"), ids, progress)
        (folder / "eval.summary.json").write_text(json.dumps(summary, indent=1, default=str))
        Path(str(path) + ".part").replace(path)
        stamp.write_text(json.dumps(ids))
        return path

    def build(self, kept: list[tuple[Arm, dict[str, str]]], specs: dict[str, Any], ids: list[str],
              settings: RunSettings) -> dict[str, Any]:
        """The report's numbers from every arm's cache (``arms_report``: the committed report's statistics)."""
        from icr2_components.evaluation.compare.cache import read_answer_records, resolve_cache_path
        from icr2_components.evaluation.reports.arms_report import arms_report

        wanted = set(ids)
        answers: dict[str, dict[str, dict]] = {}
        left_out: dict[str, int] = {}
        for arm, _ in kept:
            spec, path = specs[arm.name], resolve_cache_path(settings.out / "arms" / arm.name / ANSWER_FILE)
            records = read_answer_records(path) if path.is_file() else []
            chosen = {}
            for record in records:
                if (record["pipeline_hash"] == spec.hash and record["context_type"] == arm.context_type
                        and record["question_id"] in wanted):
                    if record.get("failed_request"):
                        left_out[arm.name] = left_out.get(arm.name, 0) + 1
                    else:
                        chosen[record["question_id"]] = record
            answers[arm.name] = chosen
        scored = arms_report(answers, list(REFERENCES), list(CLAIM_ARMS), question_ids=ids, pairs=list(PAIRS))
        rows = {}
        for name, row in scored["arms"].items():
            arm = arm_by_name(name)
            rows[name] = {**row, "label": arm.label, "pipeline": arm.pipeline, "context_type": arm.context_type,
                          "weights": dict(next(w for a, w in kept if a.name == name)), "paper": arm.paper}
        return {
            "experiment": self.describe(),
            "questions": {"drawn": len(ids), "complete": scored["n"], "incomplete": len(ids) - scored["n"]},
            "n": scored["n"],
            "arms": rows,
            "pairs": scored["pairs"],
            "claim": scored["claim"],
            "paper": [asdict(f) for f in self.paper_figures],
            "statistics": {
                "interval": "Wilson 95% per arm (0/1 per answer), on the questions every arm run answered",
                "references": "each arm against vanilla_rag and against untrained: exact McNemar on the same "
                              "questions, Holm within each reference's family",
                "pairs": "the registered pairs run: exact McNemar, one Holm family",
                "claim": f"an arm of {', '.join(CLAIM_ARMS)} beats both references by >= "
                         f"{scored['claim']['min_difference']} answer match, Holm over the "
                         f"{scored['claim']['family_size']} comparisons (an arm not run counts p = 1)",
                "seed": settings.seed,
                "paper": "the paper's figures are another model on other questions: shown beside, not tested",
            },
            "run": {
                "out": str(settings.out),
                "backend": settings.backend.describe() if settings.backend is not None else "pipelines' own (local)",
                "max_new_tokens": settings.max_new_tokens,
                "reuse_prompt_prefix": settings.reuse_prompt_prefix,
                "limit": settings.limit,
                "registered_size": self.registered_size,
                "conditions_asked": settings.conditions_asked,
                "pipelines": {a.name: {"file": specs[a.name].path, "hash": specs[a.name].hash} for a, _ in kept},
                "answers_left_out": left_out,
            },
        }

    # -- the report ------------------------------------------------------------------------------------------------

    def tables(self, report: dict[str, Any]) -> list[tuple[str, str, list[str], list[list[str]]]]:
        from icr2_components.evaluation.experiments.icr2_fine_tuning_report import fine_tuning_tables

        return fine_tuning_tables(report)

    def plot(self, report: dict[str, Any], path: Path) -> Path:
        from icr2_components.evaluation.experiments.icr2_fine_tuning_report import plot_fine_tuning

        return plot_fine_tuning(report, path)


__all__ = ["Icr2FineTuning"]
