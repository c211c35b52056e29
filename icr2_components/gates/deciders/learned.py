"""`learned`: retrieve when a model learned from the reader's own need-for-retrieval labels says so.

The labels are RetrievalQA's per-model notion of need (https://arxiv.org/abs/2402.16457, §2 and A.2: a question
needs retrieval for a model when the model answers it wrong closed-book and right with the context), written by
`icr2 label-retrieval-need`; `icr2 train-gate` fits, on those questions, either a logistic regression over the
question's embedding (the bundled MiniLM) plus cheap signals (date/recency words, the top BM25 score), or SKR's
nearest-neighbour judgement (Wang et al. 2023, https://arxiv.org/abs/2310.05002: the share of needing questions
among the k most similar training questions), and picks the cut on its probability for a stated objective. No
language model is asked: a decision is one embedding (and one BM25 lookup with `top_score`, one kNN lookup with
`top_dense_score`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from icr2_components.artifacts.gate_artifact import (
    LEARNED_KINDS,
    GateArtifact,
    artifact_file,
    load_gate_artifact,
    read_vectors_file,
)
from icr2_components.gates.gate_decider import (
    GateDecider,
    GateDecision,
    GateQuestion,
    YesNoAnswer,
    YesNoModel,
    check_artifact_path,
    register_gate_decider,
)
from icr2_components.gates.need_features import NeedFeatures

LEARNED_SCORING = "learned"


def logistic_probabilities(artifact: GateArtifact, features: np.ndarray) -> np.ndarray:
    """P(needs retrieval) of a logistic artifact for feature rows (standardised as in training)."""
    mean = np.asarray(artifact.feature_mean, dtype=np.float64)
    scale = np.asarray(artifact.feature_scale, dtype=np.float64)
    if features.shape[1] != len(mean):
        raise ValueError(f"The gate artifact expects {len(mean)} features per question, got {features.shape[1]}: "
                         "its embedding model or signals differ from these; train it again.")
    z = ((features - mean) / scale) @ np.asarray(artifact.weights, dtype=np.float64) + float(artifact.bias)
    return 1.0 / (1.0 + np.exp(-z))


def knn_probabilities(embeddings: np.ndarray, vectors: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """SKR's judgement: the share of needing questions among the ``k`` nearest (cosine) training questions."""
    similarities = embeddings @ vectors.T
    k = min(k, vectors.shape[0])
    nearest = np.argsort(-similarities, axis=1, kind="stable")[:, :k]
    return labels[nearest].mean(axis=1)


def read_knn_vectors(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The vectors and labels of a knn gate's ``.npz`` as they are (``GateArtifact.knn_vectors`` also checks them
    against the artifact)."""
    return read_vectors_file(Path(path))


class LearnedGateModel:
    """A loaded learned artifact: features of questions -> P(needs retrieval)."""

    def __init__(self, path: str, device: str | None = None) -> None:
        self.path = path
        self.artifact = load_gate_artifact(path, LEARNED_KINDS, "learned")
        # a learned artifact is refused at load without its embedding model
        assert self.artifact.embedding_model is not None
        self.features = NeedFeatures(self.artifact.embedding_model, self.artifact.signals, self.artifact.index, device)
        self._knn = self.artifact.knn_vectors(path) if self.artifact.kind == "knn" else None

    def probabilities(self, questions: list[str]) -> np.ndarray:
        if self._knn is not None:  # loaded for a knn artifact only
            vectors, labels = self._knn
            embeddings = self.features.embed(questions)
            if embeddings.shape[1] != vectors.shape[1]:
                raise ValueError(f"The knn gate's vectors ({self.artifact.vectors_path(self.path)}) have "
                                 f"{vectors.shape[1]} dimensions, but {self.artifact.embedding_model} embeds questions "
                                 f"in {embeddings.shape[1]}: the vectors are not this artifact's. Train the gate again "
                                 "with icr2 train-gate.")
            return knn_probabilities(embeddings, vectors, labels, self.artifact.knn_k)
        return logistic_probabilities(self.artifact, self.features.matrix(questions))


@dataclass(frozen=True)
class LearnedParameters:
    """The `learned` method's own parameter.

    :param artifact: The gate artifact of `icr2 train-gate --kind logistic|knn` (required; read at `warm_up`).
        It records the questions it was trained on, which `icr2 compare` then keeps out of its evaluation.
    """

    artifact: str | None = None

    def __post_init__(self) -> None:
        check_artifact_path(self.artifact)


@register_gate_decider("learned")
class LearnedDecider(GateDecider):
    """Retrieves when the learned model's P(needs retrieval) reaches the artifact's cut (or a run's `threshold`).

    Reads its own `artifact` (required) and the device; asks no language model (``needs_model`` is False), so a
    gate with `method: learned` may be built with `model: null`. The decision shows P(yes) as `p_yes`, scoring
    `learned`.
    """

    needs_model = False
    Parameters = LearnedParameters

    def __init__(self, parameters: LearnedParameters | None = None, *, device: str | None = None) -> None:
        super().__init__(parameters, device=device)
        self.model: LearnedGateModel | None = None

    def _artifact(self) -> str:
        """The artifact parameter, which this method requires.

        :raises ValueError: when it is unset.
        """
        artifact = self.parameters.artifact
        if not artifact:
            raise ValueError("method='learned' needs artifact= (a gate artifact made by icr2 train-gate LABELS "
                             "--kind logistic --out ARTIFACT.json).")
        return artifact

    def check(self) -> None:
        artifact = self._artifact()
        if not artifact_file(artifact).is_file():
            raise ValueError(
                f"Gate artifact not found: {artifact}. Make it with icr2 train-gate LABELS --kind logistic "
                f"--out {artifact}."
            )

    def warm_up(self) -> None:
        if self.model is None:
            self.model = LearnedGateModel(self._artifact(), device=self.device)

    def decide(self, question: GateQuestion, model: YesNoModel | None) -> GateDecision:
        self.warm_up()
        assert self.model is not None  # warm_up sets it
        p = float(self.model.probabilities([question.query])[0])
        cut = question.cut if question.cut is not None else float(self.model.artifact.cut)
        answer = YesNoAnswer(p_yes=p, scoring=LEARNED_SCORING)
        return GateDecision.at_cut(answer, cut)
