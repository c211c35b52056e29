"""Running gate methods over labelled questions: each method's decisions and scores, held apart from its training.

A method is named as ``icr2 eval-gate --methods`` takes it: ``always``, ``never``, ``vanilla``, ``ta_are``,
``threshold`` (the gate's own threshold), ``threshold=ARTIFACT`` (a calibrated threshold) or
``learned=ARTIFACT`` (a learned gate), optionally with a display name: ``name:method=ARTIFACT``. Every method runs
through :class:`~icr2_components.gates.TimeAwareRetrievalGate`, as a pipeline would run it; the score of a method
is its P(yes) (``vanilla``, ``ta_are``, ``threshold``) or its learned probability; ``always`` and ``never`` have
no score (no AUROC). Questions an artifact was trained or calibrated on (its ``probed_ids``) are refused: an
evaluation on them says nothing about held-apart questions.

Usage:
    >>> from icr2_components.evaluation.gates.gate_methods import parse_methods, run_methods
    >>> methods = parse_methods("always,never,vanilla,ta_are,learned=runs/gate/learned.json")
    >>> runs = run_methods(methods, labelled, model="smollm2-135m-instruct", today="2025-12-01")
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from icr2_components.evaluation.compare.held_out import HeldOutError

ARTIFACT_METHODS = ("threshold", "learned")


@dataclass(frozen=True)
class MethodSpec:
    name: str
    method: str
    artifact: str | None = None


def parse_methods(text: str | Sequence[str]) -> list[MethodSpec]:
    """``"always,never,vanilla,learned=ART"`` -> specs (module docstring); names must be unique."""
    from icr2_components.gates.gate_decider import gate_decider_names

    items = [t.strip() for t in (text.split(",") if isinstance(text, str) else text) if t.strip()]
    if not items:
        raise ValueError("--methods lists at least one gate method (e.g. always,never,vanilla,ta_are).")
    specs = []
    for item in items:
        name, _, rest = item.rpartition(":") if ":" in item.split("=", 1)[0] else ("", "", item)
        method, _, artifact = rest.partition("=")
        method = method.strip()
        if method not in gate_decider_names():
            raise ValueError(f"--methods: {method!r} is not a gate method; one of {list(gate_decider_names())}.")
        if artifact and method not in ARTIFACT_METHODS:
            raise ValueError(f"--methods: {method} takes no artifact (only {ARTIFACT_METHODS} do), got {item!r}.")
        if method == "learned" and not artifact:
            raise ValueError("--methods: learned needs its artifact: learned=ARTIFACT.json (icr2 train-gate --out).")
        default_name = method if not artifact else f"{method}:{artifact.rsplit('/', 1)[-1].removesuffix('.json')}"
        specs.append(MethodSpec(name.strip() or default_name, method, artifact.strip() or None))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(
            f"--methods names each method once; repeated: {sorted({n for n in names if names.count(n) > 1})}"
            " (give one a name: name:method=ARTIFACT)."
        )
    return specs


def check_held_apart(specs: Sequence[MethodSpec], question_ids: Sequence[str]) -> dict[str, int]:
    """Refuse questions any method's artifact was trained on, and an artifact whose knn vectors cannot be read;
    returns each artifact's training-set size."""
    from icr2_components.artifacts.gate_artifact import GateArtifact

    sizes = {}
    wanted = set(question_ids)
    for spec in specs:
        if spec.artifact is None:
            continue
        artifact = GateArtifact.load(spec.artifact)
        if artifact.kind == "knn":  # its vectors file too, before any method runs (it was read after the first)
            artifact.knn_vectors(spec.artifact)
        overlap = sorted(wanted & set(artifact.probed_ids))
        if overlap:
            raise HeldOutError(
                f"{len(overlap)} of the evaluated questions ({', '.join(overlap[:5])}"
                f"{', ...' if len(overlap) > 5 else ''}) were used to train or calibrate {spec.artifact}; "
                "evaluate on held-apart labels (e.g. the held-out NQ ids), or retrain without them."
            )
        sizes[spec.artifact] = len(artifact.probed_ids)
    return sizes


def gate_model_settings(model: str | None, backend: str | None) -> tuple[str | None, dict[str, Any]]:
    """``(model, gate options)`` of the gates: the local ``model``, or the backend file's model (a served one is
    asked over its API for P(yes) from top log-probabilities: ``server``; a local one replaces ``model``)."""
    if not backend:
        return model, {}
    from icr2_components.backends.pipelines import resolve_backend
    from icr2_components.gates import TimeAwareRetrievalGate

    chosen = resolve_backend(backend)
    variant = chosen.follow(TimeAwareRetrievalGate, {"model": model}) if chosen is not None else None
    if variant is None:
        return model, {}
    parameters = variant["init_parameters"]
    return parameters.get("model"), ({"server": parameters["server"]} if parameters.get("server") else {})


def run_methods(specs: Sequence[MethodSpec], labelled: Sequence[Any], model: str | None = "smollm2-135m-instruct",
                today: str | None = None, device: str | None = None, progress: bool = True,
                gate_options: dict[str, Any] | None = None, concurrency: int = 1) -> dict[str, dict[str, Any]]:
    """Each method's ``decisions`` and ``scores`` (None for always/never) on ``labelled`` (same order), and its
    ``cut`` (the P(yes)/probability cut it decided at), ``stats`` and how many decisions had no score.
    ``concurrency``: questions a served gate is asked at once (``gate_options["server"]``; an in-process gate asks
    one at a time); the decisions are in ``labelled``'s order whatever it is. A request failing through every
    retry stops the run (a decision cannot be left out of a paired comparison)."""
    from tqdm.auto import tqdm

    from icr2_components.concurrency import Job, ordered_calls
    from icr2_components.errors import find_in_causes
    from icr2_components.gates import TimeAwareRetrievalGate
    from icr2_components.gates.gate_decider import gate_decider_class
    from icr2_components.models.served_model import ServedModelError

    check_held_apart(specs, [q.id for q in labelled])
    results: dict[str, dict[str, Any]] = {}
    for spec in specs:
        decider = gate_decider_class(spec.method)
        options = dict(gate_options or {})
        if not decider.needs_model:
            options.pop("server", None)
        gate = TimeAwareRetrievalGate(method=spec.method, model=model if decider.needs_model else None, today=today,
                                      model_settings={"device": device}, artifact=spec.artifact, **options)
        gate.warm_up()
        decisions, scores, cuts = [], [], set()
        slots = concurrency if options.get("server") else 1
        ask = gate.run_async if slots > 1 else gate.run  # a served gate's requests overlap on the event loop
        jobs = (Job(question.id, partial(ask, query=question.question)) for question in labelled)
        outcomes = ordered_calls(jobs, slots, retry_if=lambda e: find_in_causes(e, ServedModelError) is not None)
        for outcome in tqdm(outcomes, total=len(labelled), desc=f"gate {spec.name}", unit="q", disable=not progress):
            if outcome.failed:
                raise outcome.error
            decision = outcome.value["decision"]
            decisions.append(bool(decision["retrieve"]))
            scores.append(decision.get("p_yes"))
            if decision.get("threshold") is not None:
                cuts.add(float(decision["threshold"]))
        fixed = spec.method in ("always", "never")
        unscored = sum(1 for s in scores if s is None)
        results[spec.name] = {"method": spec.method, "artifact": spec.artifact, "decisions": decisions,
                              "scores": None if fixed or unscored else [float(s) for s in scores],
                              "unscored": 0 if fixed else unscored, "cut": cuts.pop() if len(cuts) == 1 else None,
                              "stats": dict(gate.stats)}
    return results


__all__ = ["ARTIFACT_METHODS", "MethodSpec", "check_held_apart", "gate_model_settings", "parse_methods", "run_methods"]
