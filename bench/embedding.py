"""Embedding throughput and quality of each backend against plain ``SentenceTransformer.encode`` fp32, in one run.

    PYTHONPATH=$PWD .venv/bin/python bench/embedding.py [--passages 2000] [--threads 2] [--rounds 3]
        [--backends onnx,onnx-int8,openvino] [--processes 2] [--beir DIR] [--max-queries 300] [--corpus-size 0]

Throughput: the first N real sample passages (``title\\ncontent``, as indexing embeds them) are embedded by the
fp32 baseline and by each backend in the same run, rounds interleaved (baseline, backend 1, backend 2, ...,
then again), each with ``--threads`` intra-op threads (torch and ONNX Runtime / OpenVINO alike), batch 64; the
best round of each is reported, as passages/s and the ratio to the baseline. ``--processes P`` adds pooled rows:
P worker processes of 1 thread each (sentence-transformers' multi-process pool for fp32, a spawn pool of
sessions for the exported backends). Model loading and the one-off ONNX export are not timed.

Quality: nDCG@10 of dense retrieval (dot product of unit vectors, exact top 10) on a BEIR folder, corpus and
queries embedded by each backend; a backend passes when it is within 0.01 of fp32. Without ``--beir`` the NQ
sample is written as a BEIR folder (``bench/retrieval_quality.py --make-from-sample``). ``--corpus-size C`` keeps
the judged passages of the chosen queries plus the first C others (0: the whole corpus).

Figures are only meaningful on idle cores: the ratio is measured within one run, but other load skews it.
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from retrieval_quality import make_from_sample, ndcg_at_k, read_beir

from icr2_components.kilt import KiltKnowledgeSource, build_sample
from icr2_components.models.sentence_backends import BACKENDS, ProcessPoolEncoder, ensure_onnx_export, sentence_encoder
from icr2_components.stores.embedding import text_to_embed

MODEL = "all-minilm-l6-v2"
BATCH = 64


def sample_texts(n: int) -> list[str]:
    texts = []
    for document in KiltKnowledgeSource(build_sample().corpus).documents():
        texts.append(text_to_embed(document, ["title"]))
        if len(texts) == n:
            break
    return texts


def make_encoder(name: str, threads: int, processes: int):
    """``name`` is a backend, or ``<backend> xP`` for a pool of P processes."""
    backend, _, pool = name.partition(" x")
    if pool:
        return ProcessPoolEncoder(MODEL, backend=backend, devices=["cpu"] * int(pool), threads_per_process=1)
    if backend == "fp32":
        import torch

        torch.set_num_threads(threads)
        # a model of its own (SentenceTransformer.encode, plain): not the process-wide cache
        from sentence_transformers import SentenceTransformer

        from icr2_components.models.resolver import resolve_model

        model = SentenceTransformer(resolve_model(MODEL, check_available=True), device="cpu")

        class Plain:
            dimension = 384

            def encode(self, texts, batch_size=BATCH):
                return model.encode(
                    texts,
                    batch_size=batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )

            def close(self):
                pass

        return Plain()
    return sentence_encoder(MODEL, backend=backend, threads=threads)


def throughput(names: list[str], texts: list[str], threads: int, rounds: int, processes: int) -> dict:
    encoders = {}
    for name in names:
        encoders[name] = make_encoder(name, threads, processes)
        encoders[name].encode(texts[:BATCH], BATCH)  # warm-up: sessions, thread pools, worker start
    best = {name: float("inf") for name in names}
    for round_number in range(rounds):
        for name in names:
            start = time.perf_counter()
            encoders[name].encode(texts, BATCH)
            seconds = time.perf_counter() - start
            best[name] = min(best[name], seconds)
            print(f"round {round_number + 1}/{rounds} {name:<16} {len(texts) / seconds:8.1f} passages/s", flush=True)
    for encoder in encoders.values():
        encoder.close()
    baseline = len(texts) / best["fp32"]
    return {
        name: {
            "passages_per_s": len(texts) / best[name],
            "ratio_to_fp32": (len(texts) / best[name]) / baseline,
            "seconds": best[name],
        }
        for name in names
    }


def quality(backends: list[str], folder: Path, max_queries: int | None, corpus_size: int, threads: int) -> dict:
    corpus, queries, qrels = read_beir(folder, max_queries)
    if corpus_size:
        judged = {pid for query_id in queries for pid in qrels[query_id]}
        others = [d for d in corpus if d.id not in judged][:corpus_size]
        corpus = [d for d in corpus if d.id in judged] + others
    print(f"{folder}: {len(corpus)} passages, {len(queries)} judged queries", flush=True)
    ids = [d.id for d in corpus]
    texts = [text_to_embed(d, ["title"]) for d in corpus]
    query_ids, query_texts = list(queries), list(queries.values())
    results = {}
    for backend in backends:
        encoder = make_encoder(backend, threads, 1)
        start = time.perf_counter()
        passages = encoder.encode(texts, BATCH)
        questions = encoder.encode(query_texts, BATCH)
        scores = questions @ passages.T
        top = np.argsort(-scores, axis=1)[:, :10]
        ndcg = float(np.mean([ndcg_at_k([ids[i] for i in row], qrels[qid])
                              for qid, row in zip(query_ids, top, strict=True)]))
        results[backend] = {
            "ndcg@10": ndcg,
            "passages": len(corpus),
            "queries": len(queries),
            "seconds": time.perf_counter() - start,
        }
        print(f"nDCG@10 {backend:<10} {ndcg:.4f}", flush=True)
    for backend in backends:
        results[backend]["delta_to_fp32"] = results[backend]["ndcg@10"] - results["fp32"]["ndcg@10"]
        results[backend]["within_0.01"] = abs(results[backend]["delta_to_fp32"]) <= 0.01
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passages", type=int, default=2000, help="sample passages for the throughput rounds")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads of every backend (the cores to use)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--backends", default="onnx,onnx-int8,openvino", help=f"compared with fp32; any of {', '.join(BACKENDS[1:])}"
    )
    parser.add_argument(
        "--processes", type=int, default=0, help="also time pools of this many 1-thread processes (fp32 and onnx-int8)"
    )
    parser.add_argument("--beir", type=Path, help="BEIR folder for nDCG@10 (default: the NQ sample written as one)")
    parser.add_argument("--max-queries", type=int, default=300)
    parser.add_argument(
        "--corpus-size", type=int, default=0, help="judged passages plus this many others (0: whole corpus)"
    )
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("bench/results/embedding.json"))
    args = parser.parse_args()
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in BACKENDS[1:]]
    if unknown:
        parser.error(f"--backends: unknown {unknown}; choose from {', '.join(BACKENDS[1:])}.")
    if args.passages < BATCH or args.threads < 1 or args.rounds < 1:
        parser.error(f"--passages must be >= {BATCH}, --threads and --rounds >= 1.")

    ensure_onnx_export(MODEL)  # the one-off export is not timed
    texts = sample_texts(args.passages)
    names = ["fp32", *backends]
    if args.processes > 1:
        names += [f"fp32 x{args.processes}", f"onnx-int8 x{args.processes}"]
    speed = throughput(names, texts, args.threads, args.rounds, args.processes)
    result = {
        "passages": len(texts),
        "threads": args.threads,
        "rounds": args.rounds,
        "batch_size": BATCH,
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "throughput": speed,
    }
    if not args.skip_quality:
        folder = args.beir
        if folder is None:
            folder = Path(tempfile.mkdtemp(prefix="beir-nq-sample-"))
            make_from_sample(folder, max_queries=args.max_queries)
        result["beir_folder"] = str(folder)
        result["quality"] = quality(["fp32", *backends], folder, args.max_queries, args.corpus_size, args.threads)

    print(
        f"\n{len(texts)} passages, {args.threads} threads, best of {args.rounds} rounds (load average "
        f"{result['load_average'][0]:.1f})"
    )
    print(
        f"{'backend':<18}{'passages/s':>12}{'x fp32':>9}"
        + ("" if args.skip_quality else f"{'nDCG@10':>10}{'delta':>9}")
    )
    for name, value in speed.items():
        line = f"{name:<18}{value['passages_per_s']:>12.1f}{value['ratio_to_fp32']:>9.2f}"
        if not args.skip_quality and name in result["quality"]:
            q = result["quality"][name]
            line += f"{q['ndcg@10']:>10.4f}{q['delta_to_fp32']:>+9.4f}" + ("" if q["within_0.01"] else "  OVER 0.01")
        print(line)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
