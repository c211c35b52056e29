"""Adaptive RAG: a gate decides whether to retrieve before answering (shipped: the learned gate calibrated for
SmolLM2, pipelines/adaptive_rag.yaml header; TA-ARE is the alternative for a capable reader).

Answers the first NQ question of the bundled sample with pipelines/adaptive_rag.yaml (8 new tokens).
Run from the repository root: .venv/bin/python examples/adaptive_rag.py
"""

from icr2_components.kilt import build_sample, read_kilt_tasks
from icr2_components.pipeline_spec import PipelineSpec

task = next(t for t in read_kilt_tasks(build_sample().tasks) if t.answers)
spec = PipelineSpec.from_file("pipelines/adaptive_rag.yaml")
result = spec.run(task.input, None, controlled=False, max_new_tokens=8)
print(f"question: {task.input}")
print(f"answer: {result['answer']}")
print(f"gold: {' | '.join(task.answers[:3])}  ({result['latency_s']:.1f} s)")
