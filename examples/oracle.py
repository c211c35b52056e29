"""Oracle: the reader sees the question's gold passages (the upper bound of retrieval).

Answers the first NQ question of the bundled sample with pipelines/oracle.yaml, given its gold passages
(KILT provenance mapped to passages of the sample index), 8 new tokens.
Run from the repository root: .venv/bin/python examples/oracle.py
"""

from icr2_components.kilt.questions import read_compare_questions
from icr2_components.pipeline_spec import PipelineSpec

questions, skips, _ = read_compare_questions(None, limit=1)
question = questions[0]
spec = PipelineSpec.from_file("pipelines/oracle.yaml")
result = spec.run(question.query, question.gold_documents, controlled=False, max_new_tokens=8)
print(f"question: {question.query}")
print(f"gold passages: {len(question.gold_documents)}")
print(f"answer: {result['answer']}")
print(f"gold: {' | '.join(question.answers[:3])}  ({result['latency_s']:.1f} s)")
