"""Judging answers without gold labels: ragas' judge metrics (groundedness to the passages shown, relevance of
the answer to the question, relevance of the passages to the question) asked of a judge model from any backend
file (``ragas_judge``), per answer record of a compare run, cached and resumable (``judgements``), and how far a
judge agrees with answer match where gold answers exist (``agreement``). Needs the ``judge`` extra (ragas)."""

from icr2_components.evaluation.judging.judgements import judge_answers
from icr2_components.evaluation.judging.ragas_judge import RagasJudge

__all__ = [
    "RagasJudge",
    "judge_answers",
]
