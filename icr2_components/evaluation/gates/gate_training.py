"""``icr2 train-gate``: a calibrated threshold or a learned need-for-retrieval gate from the reader's own labels.

Kinds (``artifacts.gate_artifact``):

- ``threshold``: the gate's vanilla-prompt P(yes) on every labelled question; the cut with the best objective
  (answer match - lambda x retrieval rate, ``evaluation.gates.gate_tradeoff.pick_cut``).
- ``logistic``: scikit-learn's ``LogisticRegression`` (class-balanced, L2 with ``c``) over the question's MiniLM
  embedding and the signals (``gates.need_features``), every column standardised. The cut is picked on
  out-of-fold probabilities (stratified ``folds``-fold cross-validation, seeded), not on the probabilities of the
  questions the model was fitted on; the weights, the standardisation and the cut go to JSON.
- ``knn``: SKR's nearest neighbours (https://arxiv.org/abs/2310.05002): P(need) is the share of needing
  questions among the ``k`` most similar labelled questions (cosine on the MiniLM embedding); the cut is picked
  on leave-one-out probabilities; the labelled vectors go to a ``.npz`` beside the JSON.

Questions whose label is excluded (``--both-wrong exclude``) still count in the objective of a threshold (its
answers are known) but are left out of fitting. The questions used are recorded in the artifact
(``probed_ids``); ``held_out`` files are checked first and any overlap is refused: training must never see an
evaluation question.

Usage:
    >>> from icr2_components.evaluation.gates.gate_training import train_gate
    >>> summary = train_gate(["runs/labels/train.jsonl"], kind="logistic", out="runs/gate/learned.json", cost=0.1,
    ...                      held_out=["bench/data/heldout_nq_ids.txt"])
    >>> summary["cut"], summary["cross_validated_auroc"]
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from icr2_components.artifacts.gate_artifact import KINDS, GateArtifact, vectors_record
from icr2_components.evaluation.compare.held_out import HeldOutError
from icr2_components.evaluation.compare.splits import file_sha256, read_question_ids
from icr2_components.evaluation.gates.gate_tradeoff import auroc_interval, check_cost, pick_cut
from icr2_components.evaluation.gates.need_labels import read_labels

DEFAULT_KNN_K = 10
DEFAULT_FOLDS = 5


def refuse_held_out(ids: Sequence[str], held_out: Sequence[str | os.PathLike]) -> dict[str, int]:
    """Raise :class:`HeldOutError` when a training question is in a held-out id file; sizes of the files read."""
    sizes = {}
    wanted = set(ids)
    for path in held_out:
        held = read_question_ids(path)
        overlap = [i for i in held if i in wanted]
        if overlap:
            raise HeldOutError(f"{len(overlap)} labelled question(s) are held out in {path} ({', '.join(overlap[:5])}"
                               f"{', ...' if len(overlap) > 5 else ''}); train only on questions kept apart from the "
                               "evaluation (label other NQ positions, e.g. --nq-range 100:400).")
        sizes[str(path)] = len(held)
    return sizes


def _standardise(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = features.mean(axis=0)
    scale = features.std(axis=0)
    return mean, np.where(scale > 1e-12, scale, 1.0)


def _logistic(c: float, seed: int):
    try:
        from sklearn.linear_model import LogisticRegression
    except ImportError:  # pragma: no cover - scikit-learn is in the environment
        raise ValueError(
            "--kind logistic needs scikit-learn (pip install scikit-learn); --kind knn does not."
        ) from None
    return LogisticRegression(C=c, class_weight="balanced", max_iter=5000, random_state=seed)


def out_of_fold_logistic(features: np.ndarray, labels: np.ndarray, c: float, folds: int, seed: int) -> np.ndarray:
    """Each question's probability from a model fitted without its fold (stratified, seeded)."""
    from sklearn.model_selection import StratifiedKFold

    smallest = int(min(labels.sum(), len(labels) - labels.sum()))
    folds = min(folds, smallest)
    if folds < 2:
        raise ValueError(f"Cross-validating the cut needs >= 2 questions of each label; got {smallest} of one. Label "
                         "more questions.")
    probabilities = np.zeros(len(labels))
    for train, test in StratifiedKFold(folds, shuffle=True, random_state=seed).split(features, labels):
        mean, scale = _standardise(features[train])
        model = _logistic(c, seed).fit((features[train] - mean) / scale, labels[train])
        probabilities[test] = model.predict_proba((features[test] - mean) / scale)[:, 1]
    return probabilities


def leave_one_out_knn(vectors: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    similarities = vectors @ vectors.T
    np.fill_diagonal(similarities, -np.inf)
    k = min(k, len(labels) - 1)
    nearest = np.argsort(-similarities, axis=1, kind="stable")[:, :k]
    return labels[nearest].mean(axis=1)


def train_gate(labels_files: Sequence[str | os.PathLike], kind: str, out: str | os.PathLike, cost: float = 0.1,
               held_out: Sequence[str | os.PathLike] = (), model: str = "smollm2-135m-instruct",
               embedding_model: str = "all-minilm-l6-v2", signals: Sequence[str] = ("date_words",),
               index: str | None = None, knn_k: int = DEFAULT_KNN_K, c: float = 1.0, folds: int = DEFAULT_FOLDS,
               both_wrong: str = "no_need", today: str | None = None, device: str | None = None, seed: int = 0,
               progress: bool = True, backend: str | None = None) -> dict[str, Any]:
    """Train (or calibrate) and write the artifact (module docstring); returns a summary for the report."""
    from icr2_components.gates.need_features import SIGNAL_COLUMNS, NeedFeatures, check_signals

    if kind not in KINDS:
        raise ValueError(f"--kind takes one of {KINDS}, got {kind!r}.")
    cost = check_cost(cost)
    if isinstance(knn_k, bool) or not isinstance(knn_k, int) or knn_k < 1:
        raise ValueError(f"--knn-k must be a positive integer, got {knn_k!r}.")
    if not c > 0:
        raise ValueError(f"--c (inverse L2 strength) must be positive, got {c!r}.")
    signals = check_signals(signals, index)
    labelled, described = read_labels(labels_files, both_wrong)
    if not labelled:
        raise ValueError(
            f"{list(map(str, labels_files))} hold no labelled question; run icr2 label-retrieval-need first."
        )
    held_sizes = refuse_held_out([q.id for q in labelled], held_out)
    fit = [q for q in labelled if q.needs_retrieval is not None]
    labels = np.asarray([float(q.needs_retrieval) for q in fit])
    if kind != "threshold" and (labels.sum() < 2 or labels.sum() > len(labels) - 2):
        raise ValueError(f"A learned gate needs >= 2 questions of each label; these labels have {int(labels.sum())} "
                         f"needing retrieval of {len(labels)}. Label more questions.")
    out = Path(out)
    common = dict(objective={}, probed_ids=[q.id for q in labelled], reader=described["reader"] or "",
                  labels_file=", ".join(map(str, labels_files)),
                  labels_sha256=", ".join(file_sha256(p) for p in labels_files))
    training: dict[str, Any] = {"questions": len(labelled), "fitted": len(fit), "needs_retrieval": int(labels.sum()),
                                "both_wrong_policy": both_wrong, "held_out_checked": held_sizes, "seed": seed,
                                "label_counts": described["counts"].get("all"),
                                "label_lines_not_read": described["skips"]}
    if kind == "threshold":
        from icr2_components.evaluation.gates.gate_methods import MethodSpec, gate_model_settings, run_methods

        model, gate_options = gate_model_settings(model, backend)
        run = run_methods([MethodSpec("threshold", "threshold")], labelled, model=model, today=today, device=device,
                          progress=progress, gate_options=gate_options)["threshold"]
        if run["scores"] is None:
            raise ValueError(f"{run['unscored']} gate decisions had no P(yes); calibration needs a probability for "
                             "every question (a local model's logits or a server's log-probabilities).")
        scores, chosen_on = run["scores"], labelled
        artifact_fields: dict[str, Any] = {"gate_model": model or str(gate_options.get("server"))}
        score_labels = [q.needs_retrieval for q in labelled]
    else:
        features = NeedFeatures(embedding_model, signals, index, device)
        questions = [q.question for q in fit]
        if kind == "logistic":
            matrix = features.matrix(questions)
            scores = out_of_fold_logistic(matrix, labels, c, folds, seed).tolist()
            mean, scale = _standardise(matrix)
            fitted = _logistic(c, seed).fit((matrix - mean) / scale, labels)
            artifact_fields = {"weights": fitted.coef_[0].tolist(), "bias": float(fitted.intercept_[0]),
                               "feature_mean": mean.tolist(), "feature_scale": scale.tolist()}
            columns = [column for signal in signals for column in SIGNAL_COLUMNS[signal]]
            weights = fitted.coef_[0].tolist()
            training.update(c=c, folds=folds, features=len(mean),
                            signal_weights=dict(zip(columns, weights[len(weights) - len(columns):], strict=True)))
        else:
            vectors = features.embed(questions)
            scores = leave_one_out_knn(vectors, labels, knn_k).tolist()
            npz = out.with_suffix(".npz")
            npz.parent.mkdir(parents=True, exist_ok=True)
            np.savez(npz, vectors=vectors.astype(np.float32), labels=labels.astype(np.float32),
                     ids=np.asarray([q.id for q in fit]))
            artifact_fields = {"knn_k": knn_k, "vectors_file": npz.name, "vectors_record": vectors_record(npz)}
            signals = []  # nearest neighbours read the embedding only
        artifact_fields.update(embedding_model=embedding_model, signals=list(signals), index=index)
        chosen_on = fit
        score_labels = [q.needs_retrieval for q in fit]
        training["cut_chosen_on"] = "out-of-fold probabilities" if kind == "logistic" else "leave-one-out probabilities"
    picked = pick_cut(scores, chosen_on, cost)
    training["auroc_of_cut_scores"] = auroc_interval(scores, score_labels, seed)
    objective = {key: picked[key] for key in ("objective_name", "cost", "objective", "answer_match", "retrieval_rate",
                                              "score_cut")}
    objective["questions"] = len(chosen_on)
    artifact = GateArtifact(kind=kind, cut=picked["cut"], training=training, **{**common, "objective": objective},
                            **artifact_fields)
    artifact.save(out)
    return {"artifact": str(out), "kind": kind, "cut": picked["cut"], "objective": objective, "training": training,
            "curve": picked["curve"], "labels": described}


__all__ = ["DEFAULT_FOLDS", "DEFAULT_KNN_K", "leave_one_out_knn", "out_of_fold_logistic", "refuse_held_out",
           "train_gate"]
