"""Vanilla RAG: hybrid retrieval over the bundled KILT sample, top 3 passages, ICR2 QA prompt.

Answers the first NQ question of the bundled sample with pipelines/vanilla_rag.yaml (8 new tokens).
Run from the repository root: .venv/bin/python examples/vanilla_rag.py
"""

from icr2_components.kilt import build_sample, read_kilt_tasks
from icr2_components.pipeline_spec import PipelineSpec

task = next(t for t in read_kilt_tasks(build_sample().tasks) if t.answers)
spec = PipelineSpec.from_file("pipelines/vanilla_rag.yaml")
result = spec.run(task.input, None, controlled=False, max_new_tokens=8)
print(f"question: {task.input}")
print(f"answer: {result['answer']}")
print(f"gold: {' | '.join(task.answers[:3])}  ({result['latency_s']:.1f} s)")
