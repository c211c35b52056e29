"""How far can the judge be trusted? Cohen's kappa of each ragas judge metric with answer match, on held-out NQ.

The first --limit ids of bench/data/heldout_nq_ids.txt (the bundled NQ sample) are answered by vanilla RAG on the
reader backend (--context-type open: its own retrieval; gold: the gold passage alone; 32 new tokens), every answer
is judged by the judge backend (ragas' groundedness, answer relevance and context relevance:
icr2_components.evaluation.judging), and each judge metric, binarised at --threshold (value >= threshold is 1), is
compared with answer match by Cohen's kappa with a 95% percentile bootstrap interval
(icr2_components.evaluation.judging.agreement.run_judge_agreement). Resumable: answers and judgements are cached
in --out.

    PYTHONPATH=. .venv/bin/python bench/judge_agreement.py --limit 12 --context-type gold

Writes bench/results/judge_agreement.json; the figures are in docs/benchmarks/answer-quality.md ("Judging without
gold labels").
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline, ragas' analytics off), before Haystack loads
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    from icr2_components.evaluation.judging.agreement import DEFAULT_THRESHOLD, run_judge_agreement

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=30, help="held-out questions (default 30)")
    parser.add_argument("--ids", default=str(ROOT / "bench/data/heldout_nq_ids.txt"))
    parser.add_argument("--reader-backend", default="llama_cpp_server")
    parser.add_argument("--judge-backend", default="llama_cpp_server")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    parser.add_argument("--context-type", default="open",
                        help="open (vanilla RAG's own retrieval, default) or a controlled context such as gold (the "
                        "gold passage alone: prompts about a third as long)")
    parser.add_argument("--server-url", help="use the shipped llama_cpp_server backend file with this api_base_url "
                        "for the reader and the judge (e.g. http://127.0.0.1:8090/v1, the native llama-server that "
                        "serves the same SmolLM2 GGUF with 4 slots); written to --out/llama_cpp_server.yaml")
    parser.add_argument("--out", default=str(ROOT / "runs/judge_agreement"))
    parser.add_argument("--results", default=str(ROOT / "bench/results/judge_agreement.json"))
    args = parser.parse_args()
    if args.server_url:
        shipped = (ROOT / "backends/llama_cpp_server.yaml").read_text()
        file = Path(args.out) / "llama_cpp_server.yaml"
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(shipped.replace("http://127.0.0.1:8089/v1", args.server_url))
        args.reader_backend = args.judge_backend = str(file)
    load_start = os.getloadavg()
    started = time.perf_counter()
    result = run_judge_agreement(args.ids, limit=args.limit, reader_backend=args.reader_backend,
                                 judge_backend=args.judge_backend, out_dir=args.out, threshold=args.threshold,
                                 context_type=args.context_type)
    result.update(wall_seconds=round(time.perf_counter() - started, 1), load_average_start=load_start,
                  load_average_end=os.getloadavg(), command=" ".join(["bench/judge_agreement.py", *sys.argv[1:]]))
    Path(args.results).parent.mkdir(parents=True, exist_ok=True)
    Path(args.results).write_text(json.dumps(result, indent=2, ensure_ascii=False))
    print(f"{result['questions']} answers; answer match {result['answer_match']['mean']}; judge {result['judge']}")
    for metric, entry in result["agreement"].items():
        ci = "-" if entry["ci95"] is None else f"[{entry['ci95'][0]:.2f}, {entry['ci95'][1]:.2f}]"
        kappa = "undefined" if entry["kappa"] is None else f"{entry['kappa']:.3f}"
        print(f"{metric}: kappa {kappa} {ci}, n={entry['n']}, agreement {entry['agreement']}, judge positive "
              f"{entry['judge_positive_rate']}, unparsable {entry['unparsable']}, failed {entry['failed']}")
    print(f"wall {result['wall_seconds']} s; load {load_start} -> {result['load_average_end']}; {args.results}")


if __name__ == "__main__":
    main()
