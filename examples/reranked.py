"""Re-ranked: hybrid top 10, re-ranked by a MiniLM bi-encoder, best 3 to the reader.

Answers the first NQ question of the bundled sample with pipelines/reranked_bi_encoder.yaml (8 new tokens).
Run from the repository root: .venv/bin/python examples/reranked.py
"""

from icr2_components.kilt import build_sample, read_kilt_tasks
from icr2_components.pipeline_spec import PipelineSpec

task = next(t for t in read_kilt_tasks(build_sample().tasks) if t.answers)
spec = PipelineSpec.from_file("pipelines/reranked_bi_encoder.yaml")
result = spec.run(task.input, None, controlled=False, max_new_tokens=8)
print(f"question: {task.input}")
print(f"answer: {result['answer']}")
print(f"gold: {' | '.join(task.answers[:3])}  ({result['latency_s']:.1f} s)")
