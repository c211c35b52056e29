"""Hyperparameter search on a dev split, as CUB does: the setting with the highest mean BCU across context types.

A pipeline lists what may be tuned in ``metadata.tunable`` (``component.init_parameter: [values]``); every
combination is run on the dev questions under CUB's controlled context types (gold, conflicting, irrelevant),
scored with BCU (gold: the gold answer; conflicting: the substituted answer; irrelevant: the gold answer standing
for the model's memory answer, as ``bcu.py`` does when no closed-book run is at hand), and the best one is written
as ``<out>/<name>.tuned.yaml`` for the test run. Ties go to the first combination listed.

The dev questions are exact ids (``question_ids``: ``icr2 compare --tune`` passes the first ``--dev-limit`` of
the seeded dev split, ``evaluation.compare.splits``) or, from Python, ``[dev_offset, dev_offset + dev_limit)`` of the
dataset. Either way the tuned YAML's ``metadata.tuned`` records the ids the search ran on
(``dev_question_ids``, with their hash, the dataset's path and SHA-256 and how they were chosen), also written
one per line to ``<out>/<name>.dev_question_ids.txt``; ``icr2 compare`` refuses to report the tuned pipeline
on any of them (``evaluation.compare.held_out``).

Usage:
    >>> from icr2_components.evaluation.compare.tuning import tune_pipeline
    >>> result = tune_pipeline("pipelines/cmt_cad.yaml", dev_limit=10, dev_offset=50, out_dir="runs/tune")
    >>> result["best"], result["tuned_file"]
    >>> tune_pipeline("pipelines/cmt_cad.yaml", question_ids=["nq-sample-00003", "nq-sample-00011"])
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from icr2_components.backends import Backend
from icr2_components.evaluation.metrics.bcu import CONTROLLED_CONTEXT_TYPES, bcu


def tunable_grid(data: dict, source: str) -> dict[str, list]:
    """``metadata.tunable`` checked against the pipeline's components: {"component.param": [values]}."""
    grid = (data.get("metadata") or {}).get("tunable") or {}
    for key, values in grid.items():
        component = key.split(".", 1)[0]
        if "." not in key or component not in (data.get("components") or {}):
            raise ValueError(
                f"{source}: metadata.tunable key {key!r} must be `component.init_parameter` of a component."
            )
        if not isinstance(values, list) or not values:
            raise ValueError(f"{source}: metadata.tunable[{key!r}] must be a non-empty list of values.")
    return dict(grid)


def with_parameters(data: dict, setting: dict[str, Any]) -> dict:
    variant = copy.deepcopy(data)
    for key, value in setting.items():
        component, parameter = key.split(".", 1)
        variant["components"][component].setdefault("init_parameters", {})[parameter] = value
    return variant


def score_answer(answer: str, context_type: str, answers: Sequence[str], conflicting_answer: str | None) -> float:
    """CUB's BCU of one answer under one controlled context type."""
    if context_type == "conflicting":
        return bcu(answer, [conflicting_answer] if conflicting_answer else [])
    return bcu(answer, answers)


def tune_pipeline(
    path: str,
    dataset: str | None = None,
    dev_limit: int = 10,
    dev_offset: int = 0,
    out_dir: str | Path = "runs/tune",
    max_new_tokens: int | None = None,
    index: str = "kilt-sample",
    context_types: Sequence[str] = CONTROLLED_CONTEXT_TYPES,
    backend: Backend | None = None,
    question_ids: Sequence[str] | None = None,
    selection: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Search ``metadata.tunable`` of ``path`` on the questions ``question_ids`` (exactly those, all known to the
    dataset) or, without them, on questions ``[dev_offset, dev_offset + dev_limit)``. ``selection`` describes how
    the ids were chosen (e.g. the split's seed and fraction) and is recorded with them.

    Returns ``{"pipeline", "best", "best_mean_bcu", "table", "tuned_file", "dev_questions", "dev_question_ids",
    "missing"}``; a pipeline with nothing tunable is returned unchanged (``tuned_file`` = ``path``).
    """
    from icr2_components.evaluation.compare.held_out import tuned_dev_ids
    from icr2_components.evaluation.compare.splits import file_sha256, ids_hash, repeated_ids, write_question_ids
    from icr2_components.kilt.context_types import build_context_set
    from icr2_components.kilt.questions import answer_pool, read_compare_questions
    from icr2_components.pipeline_spec import PipelineSpec

    unknown = [t for t in context_types if t not in CONTROLLED_CONTEXT_TYPES]
    if unknown:
        raise ValueError(f"Tuning uses CUB's controlled context types {list(CONTROLLED_CONTEXT_TYPES)}; got {unknown}.")
    from icr2_components.resources.lookup import resolve_file

    source = resolve_file("pipelines", path)  # a YAML path or a shipped pipeline's name
    data = yaml.safe_load(source.read_text())
    grid = tunable_grid(data, str(path))
    earlier = tuned_dev_ids(data, str(path)) or []  # re-tuning a tuned pipeline: it has seen those too
    if not grid:
        return {"pipeline": str(path), "best": {}, "best_mean_bcu": None, "table": [], "tuned_file": str(path),
                "dev_questions": 0, "dev_question_ids": [], "missing": {}}
    if question_ids is not None:
        question_ids = [str(i) for i in question_ids]
        if not question_ids or repeated_ids(question_ids):
            raise ValueError("question_ids must list each dev question once (and at least one).")
        questions, _, dataset_path = read_compare_questions(dataset, index=index, ids=question_ids)
        read_ids = {q.id for q in questions}
        unknown = [i for i in question_ids if i not in read_ids]
        if unknown:
            raise ValueError(f"{len(unknown)} dev question id(s) are not usable questions of {dataset_path}: "
                             f"{unknown[:5]}.")
        chosen = {"question_ids": "given", **(selection or {})}
    else:
        if dev_limit < 1 or dev_offset < 0:
            raise ValueError("dev_limit must be >= 1 and dev_offset >= 0.")
        questions, _, dataset_path = read_compare_questions(dataset, limit=dev_offset + dev_limit, index=index)
        questions = questions[dev_offset:]
        if not questions:
            raise ValueError(f"No dev question at offset {dev_offset} of {dataset_path}; lower --dev-offset.")
        chosen = {"dev_offset": dev_offset, "dev_limit": dev_limit, **(selection or {})}
    dev_ids = [q.id for q in questions]
    pool = answer_pool(dataset_path)
    contexts = {
        q.id: build_context_set(q.id, q.answers, q.gold_documents, q.irrelevant_candidates, pool) for q in questions
    }
    missing: dict[str, int] = {}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    keys = list(grid)
    table = []
    for values in itertools.product(*(grid[k] for k in keys)):
        setting = dict(zip(keys, values, strict=True))
        variant_file = out / f"{source.stem}.candidate.yaml"
        variant_file.write_text(yaml.safe_dump(with_parameters(data, setting), sort_keys=False))
        spec = PipelineSpec.from_file(str(variant_file), backend=backend)
        per_type: dict[str, list[float]] = {t: [] for t in context_types}
        for question in questions:
            context_set = contexts[question.id]
            for context_type in context_types:
                documents = context_set.documents(context_type)
                if documents is None:
                    if not table:  # count once, not once per setting
                        missing[context_type] = missing.get(context_type, 0) + 1
                    continue
                answer = spec.run(question.query, documents, controlled=True, max_new_tokens=max_new_tokens)["answer"]
                per_type[context_type].append(score_answer(answer, context_type, question.answers,
                                                           context_set.conflicting_answer))
        means = {t: (sum(v) / len(v) if v else None) for t, v in per_type.items()}
        known = [m for m in means.values() if m is not None]
        table.append({"setting": setting, "bcu": means, "mean_bcu": sum(known) / len(known) if known else None})
    best = max(table, key=lambda row: -1.0 if row["mean_bcu"] is None else row["mean_bcu"])
    tuned_file = out / f"{source.stem}.tuned.yaml"
    tuned = with_parameters(data, best["setting"])
    seen = earlier + [i for i in dev_ids if i not in set(earlier)]
    ids_file = write_question_ids(out / f"{source.stem}.dev_question_ids.txt", seen,
                                  [f"dev questions {path} was tuned on ({len(seen)}), dataset {dataset_path}"])
    tuned.setdefault("metadata", {})["tuned"] = {
        "from": str(path), "setting": best["setting"], "dev_mean_bcu": best["mean_bcu"],
        "dev_questions": len(dev_ids), **({"dev_offset": dev_offset} if question_ids is None else {}),
        **({"earlier_dev_questions": len(earlier)} if earlier else {}),
        "dataset": dataset_path, "dataset_sha256": file_sha256(dataset_path), "dev_selection": chosen,
        "dev_question_ids_file": str(ids_file), "dev_question_ids_sha256": ids_hash(seen),
        "dev_question_ids": seen,
    }
    tuned_file.write_text(yaml.safe_dump(tuned, sort_keys=False))
    (out / f"{source.stem}.tuning.json").write_text(json.dumps({"table": table, "missing": missing}, indent=1))
    (out / f"{source.stem}.candidate.yaml").unlink(missing_ok=True)
    return {"pipeline": str(path), "best": best["setting"], "best_mean_bcu": best["mean_bcu"], "table": table,
            "tuned_file": str(tuned_file), "dev_questions": len(questions), "dev_question_ids": dev_ids,
            "missing": missing}
