"""``icr2 reproduce NAME``: run a registered experiment through ``icr2 compare``'s machinery and report it beside
the paper.

The run, in ``out_dir``:
1. ``pipelines/``: the experiment's variants (e.g. the plain and the query-aware prompt) and references
   (closed-book, oracle) as pipeline YAMLs; ``--backend`` then moves their reader to a server, as in compare.
2. Conditions the reader cannot run are refused with the reason (a prompt longer than the model's context,
   counted with the model's own tokenizer) and reported; the others are kept.
3. ``data/``: the questions drawn (the first ``limit``, else the registered size), each under each kept condition,
   as one ICR2 benchmark file whose corpus in context is the condition's (the gold document at its position);
   the references' file (the question with its gold passage).
4. ``compare/`` and ``references/``: :func:`run_compare` answers them under the ``corpus`` and ``open`` context
   types: its answer cache (resume after a kill: run the command again), concurrency against a served backend,
   failed requests recorded and asked again next run, and compare's own report of the raw runs.
5. The experiment's metric scores every answer; a question counts once it is answered under every condition and
   variant (the statistics are paired). ``report.json``, ``report.md``, ``report.html`` and the plot(s):
   accuracy per condition with 95% Wilson intervals beside the paper's figures (its model named), Cochran's Q
   across positions and exact McNemar first vs last per curve, query-aware against plain per condition (exact
   McNemar, Holm over the conditions), closed-book and oracle.

Usage example:
```python
from icr2_components.evaluation.experiments.runner import run_experiment

report = run_experiment("kv-retrieval", limit=2, conditions="75keys@1,75keys@75", out_dir="runs/kv",
                        max_new_tokens=24, progress=False)
print(report["cells"][0]["accuracy"], report["files"]["html"])
```
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from icr2_components.errors import UserInputError
from icr2_components.evaluation.experiments.protocol import (
    Experiment,
    RunSettings,
    get_experiment,
    split_question_id,
)
from icr2_components.parameters import boolean

logger = logging.getLogger(__name__)
DEFAULT_OUT = "runs/reproduce"


def reader_of(path: Path, backend) -> Any:
    """The reader component of a pipeline file as the run will use it (after ``backend``), warmed up."""
    from icr2_components.pipeline_spec import PipelineSpec

    spec = PipelineSpec.from_file(str(path), backend=backend)
    pipeline = spec.pipeline(controlled=False)
    reader = pipeline.get_component(spec.outputs["replies"].split(".", 1)[0])
    spec.warm_up(pipeline)
    return reader


def scored_answers(experiment: Experiment, report: dict, context_type: str,
                   records: list[dict] | None = None) -> tuple[dict, dict]:
    """``{pipeline name: {question id: True/False}}`` of a compare run's answers, and per pipeline the counts of
    answers left out (failed requests, to be asked again) and of errors (scored wrong). ``records``: the answer
    records the run scored (``run_compare``'s ``records_out``: each with the question set's gold now); None: the
    run's cache file as written."""
    from icr2_components.evaluation.compare.cache import read_answer_records

    run = report["run"]
    names = {info["hash"]: name for name, info in run["pipelines"].items()}
    wanted = set(run["question_ids"])
    scores: dict[str, dict[str, bool]] = {name: {} for name in run["pipelines"]}
    counts: dict[str, dict[str, int]] = {name: {"failed_requests": 0, "errors": 0} for name in run["pipelines"]}
    for record in (records if records is not None else read_answer_records(run["cache"])):
        name = names.get(record["pipeline_hash"])
        if name is None or record["question_id"] not in wanted or record["context_type"] != context_type:
            continue
        if record.get("failed_request"):
            counts[name]["failed_requests"] += 1
            continue
        if record.get("error"):
            counts[name]["errors"] += 1
        scores[name][record["question_id"]] = (not record.get("error")
                                               and experiment.score(record.get("answer") or "", record["answers"]))
    return scores, counts


def run_experiment(
    name: str,
    backend: Any = None,
    limit: int | None = None,
    out_dir: str | Path | None = None,
    max_new_tokens: int | None = None,
    progress: bool = True,
    conditions: str | list[str] | None = None,
    concurrency: int | None = None,
    stats_seed: int | None = None,
    train: bool = False,
    options: dict[str, str] | None = None,
    trainer: Any = None,
    reuse_prompt_prefix: bool = False,
) -> dict[str, Any]:
    """Run the registered experiment ``name`` (see the module doc) and write its report; returns the report.
    ``limit``: the first N questions (default: the registered size); ``conditions``: a subset of the conditions
    by name or shell pattern (``75keys@*``); ``backend``: a backend file or shipped name (``llama_cpp_server``);
    ``train``: train the experiment's arms first (only where ``Experiment.trains``), with ``trainer`` (a function
    (recipe file, dotted overrides) -> training summary; ``icr2 reproduce --train`` passes the package's training
    entry point); ``options``: the experiment's own settings (``Experiment.options``); ``reuse_prompt_prefix``:
    in-process readers reuse the last prompt's key/value cache for the prefix the next prompt shares with it
    (``run_compare``'s; the answers and their cache are the same).

    :raises UserInputError: an unknown experiment, a bad ``limit`` or ``max_new_tokens``, a condition pattern
        matching nothing, an option or ``--train`` the experiment does not take, or every condition refused.
    """
    from icr2_components.backends.pipelines import resolve_backend
    from icr2_components.evaluation.experiments.report import write_report

    experiment = get_experiment(name)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise UserInputError(f"--limit must be a positive integer, got {limit!r}.")
    if max_new_tokens is not None and (isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int)
                                       or max_new_tokens < 1):
        raise UserInputError(f"--max-new-tokens must be a positive integer, got {max_new_tokens!r}.")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or concurrency < 1):
        raise UserInputError(f"--concurrency must be a positive integer, got {concurrency!r}.")
    options = dict(options or {})
    unknown = sorted(set(options) - set(experiment.options))
    if unknown:
        takes = ", ".join(f"{k} ({v})" for k, v in experiment.options.items()) or "none"
        raise UserInputError(f"{experiment.name} takes no setting {', '.join(unknown)}; its settings: {takes}.")
    if train and not experiment.trains:
        raise UserInputError(f"--train: {experiment.name} has nothing to train.")
    out = Path(out_dir) if out_dir is not None else Path(DEFAULT_OUT) / experiment.name
    out.mkdir(parents=True, exist_ok=True)
    settings = RunSettings(
        conditions=experiment.select(conditions), conditions_asked=conditions, backend=resolve_backend(backend),
        limit=limit, max_new_tokens=max_new_tokens or experiment.registered_max_new_tokens, out=out,
        progress=progress, concurrency=concurrency,
        seed=experiment.seeds.get("stats_seed", 0) if stats_seed is None else stats_seed, train=train,
        options=options, trainer=trainer, reuse_prompt_prefix=boolean(reuse_prompt_prefix, "reuse_prompt_prefix"))
    report = experiment.run(settings)
    write_report(report, out, experiment)
    return report


def run_curves(experiment: Experiment, settings: RunSettings,
               scored: dict[str, list[dict]] | None = None) -> dict[str, Any]:
    """A :class:`CurveExperiment`'s run (see the module doc); returns its report, not yet written. ``scored``: a
    dict that receives the answer records compare scored, by folder (``compare``, ``references``), each with the
    gold of the data prepared now, for an experiment that scores them further."""
    from icr2_components.evaluation.compare.run import run_compare
    from icr2_components.evaluation.experiments.report import build_report

    out, backend, selected = settings.out, settings.backend, settings.conditions
    paths = experiment.write_pipelines(out / "pipelines")
    variant_paths = paths[:len(experiment.variants())]
    reference_paths = paths[len(experiment.variants()):]
    refused = experiment.refusals(selected, reader_of(variant_paths[0], backend), settings.max_new_tokens)
    refused_names = {r.condition for r in refused}
    kept = [c for c in selected if c.name not in refused_names]
    for refusal in refused:
        logger.warning("%s: condition %s refused: %s", experiment.name, refusal.condition, refusal.reason)
    if not kept:
        raise UserInputError(f"{experiment.name}: every condition asked for is refused: "
                             + "; ".join(f"{r.condition}: {r.reason}" for r in refused))
    prepared = experiment.prepare(kept, settings.limit, out / "data", progress=settings.progress)
    if not prepared.question_ids:
        raise UserInputError(f"{experiment.name}: no question could be drawn ({prepared.drawn}).")
    common = settings.compare_settings()
    # the answers scored with the gold of the data prepared now (never the gold a cached answer was written with)
    main_records: list[dict] = []
    main = run_compare([str(p) for p in variant_paths], dataset=str(prepared.conditions_file),
                       context_types=["corpus"], out_dir=out / "compare", records_out=main_records, **common)
    references = None
    reference_records: list[dict] = []
    if reference_paths and prepared.references_file is not None:
        references = run_compare([str(p) for p in reference_paths], dataset=str(prepared.references_file),
                                 context_types=["open"], out_dir=out / "references", records_out=reference_records,
                                 **common)

    scores, counts = scored_answers(experiment, main, "corpus", main_records)
    by_cell: dict[str, dict[str, dict[str, bool]]] = {}
    for variant, answers in scores.items():
        for question_id, right in answers.items():
            base, condition = split_question_id(question_id)
            by_cell.setdefault(variant, {}).setdefault(condition, {})[base] = right
    if scored is not None:
        scored.update(compare=main_records, references=reference_records)
    reference_scores, reference_counts = (scored_answers(experiment, references, "open", reference_records)
                                          if references is not None
                                          else ({}, {}))
    report = build_report(experiment, kept, by_cell, reference_scores, prepared, seed=settings.seed)
    report["refused"] = [{"condition": r.condition, "reason": r.reason} for r in refused]
    report["run"] = {
        "out": str(out),
        "backend": backend.describe() if backend is not None else "pipelines' own (local)",
        "max_new_tokens": settings.max_new_tokens,
        "reuse_prompt_prefix": settings.reuse_prompt_prefix,
        "limit": settings.limit,
        "registered_size": experiment.registered_size,
        "at_registered_size": settings.at_registered_size(experiment.registered_size),
        "conditions_asked": settings.conditions_asked,
        "pipelines": {**main["run"]["pipelines"], **(references["run"]["pipelines"] if references else {})},
        "compare_reports": {"conditions": main["files"]["html"],
                            "references": references["files"]["html"] if references else None},
        "counters": {"conditions": main["run"]["counters"],
                     "references": references["run"]["counters"] if references else None},
        "answers_left_out": {"conditions": counts, "references": reference_counts},
        "drawn": prepared.drawn,
        "data": {"conditions": str(prepared.conditions_file),
                 "references": str(prepared.references_file) if prepared.references_file else None},
    }
    return report
