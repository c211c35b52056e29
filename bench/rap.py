"""RAP benchmark on SmolLM2 (CPU): scoring overhead, passage recall, answer accuracy.

1. Overhead: at 2K, 4K and 8K prompt tokens, a plain forward pass (use_cache=False, logits_to_keep=1) against
   RAP scoring of the same input: all 30 x 9 heads' rows from the last prompt token, reduced per passage
   (probing), and the filter's case (the selected heads only, stopping after the deepest one). Time is wall
   clock; peak memory is the kernel's peak-RSS mark (VmHWM, reset before the call) over the pre-call RSS, with
   glibc's mmap threshold fixed so freed activations are returned (torch's CPU allocator is invisible to
   tracemalloc).
2. Recall: heads probed on NQ-sample CiC instances, then on held-apart instances the recall of the gold passage
   in RAP's selection (union of the Q heads' top-M) against BM25 and MiniLM re-ranking of the same contexts,
   at the same number of passages per instance.
3. Accuracy: the reader on the full CiC (vanilla), on the RAP-filtered CiC and on the gold passage (oracle).

Usage: .venv/bin/python bench/rap.py [--lengths 2048 4096 8192] [--probe 20] [--eval 20]
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import argparse
import json
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
# glibc reads its malloc tuning at start-up: re-exec once with a fixed mmap threshold so that every large tensor
# is mmapped and returned on free, and peak-RSS growth measures what a computation holds (see measure()).
if os.environ.get("MALLOC_MMAP_THRESHOLD_") is None and sys.platform.startswith("linux"):
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "131072"
    os.execv(sys.executable, [sys.executable, *sys.argv])

import psutil
import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import contextlib

from icr2_components.artifacts.retrieval_heads import RetrievalHeadArtifact
from icr2_components.evaluation.metrics.answer_match import answer_match
from icr2_components.filters.passage_scoring import encode_cic_prompt
from icr2_components.filters.probing.head_probing import split_instances
from icr2_components.filters.probing.probing_job import probe_to_artifact
from icr2_components.models.attention import passage_attention_scores
from icr2_components.models.cache import MODEL_CACHE
from icr2_components.training.sample_data import nq_sample_instances

RESULTS = Path(__file__).resolve().parent / "results"
MODEL = "smollm2-135m-instruct"


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} missing from /proc/self/status")


def release_freed_memory() -> None:
    """Hand freed heap pages back to the OS (glibc), so each measurement starts from a comparable RSS."""
    import ctypes

    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def measure(fn) -> tuple[float, int]:
    """Seconds and peak resident-set growth (bytes) of ``fn()``.

    The peak is the kernel's high-water mark (VmHWM), reset just before the call by writing 5 to
    /proc/self/clear_refs: no sampling thread that can miss a short peak. The bench runs with a fixed glibc mmap
    threshold (see the re-exec at the top), because glibc's default moving threshold keeps freed multi-MB
    activations in the heap and made the same plain forward pass measure 115-163 MB at 4K tokens.
    """
    import gc

    gc.collect()
    release_freed_memory()
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    base = _status_bytes("VmRSS")
    start = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - start
    return elapsed, _status_bytes("VmHWM") - base


def long_prompt(tokenizer, target_tokens: int):
    """A CiC QA prompt of about ``target_tokens`` tokens over NQ-sample passages (gold + BM25 confounders)."""
    instances = nq_sample_instances(1, passages=max(4, target_tokens // 150 + 4), offset=7)
    instance = instances[0]
    documents = list(instance.documents)
    while True:
        encoded = encode_cic_prompt(tokenizer, "qa", instance.query, documents)
        if encoded.input_ids.shape[1] <= target_tokens or len(documents) == 1:
            return encoded
        documents = documents[:-1]


def bench_overhead(model, tokenizer, lengths, artifact_heads, repeats: int = 2) -> list[dict]:
    rows = []
    layers = sorted({layer for layer, _ in artifact_heads})
    # Untimed warm-up of all three paths on a short prompt: tap registration and first-call allocations are not
    # charged to whichever variant happens to run first (that made an earlier 2K point read 1.89x).
    warm = long_prompt(tokenizer, 512)
    with torch.inference_mode():
        model(input_ids=warm.input_ids, use_cache=False, logits_to_keep=1)
    passage_attention_scores(model, warm.input_ids, warm.token_spans)
    passage_attention_scores(model, warm.input_ids, warm.token_spans, layers=layers)
    for target in tqdm(lengths, desc="overhead (2K/4K/8K)"):
        encoded = long_prompt(tokenizer, target)
        ids = encoded.input_ids

        def plain(ids=ids):
            with torch.inference_mode():
                model(input_ids=ids, use_cache=False, logits_to_keep=1)

        def probe_all(ids=ids, encoded=encoded):
            passage_attention_scores(model, ids, encoded.token_spans)

        def filter_heads(ids=ids, encoded=encoded):
            passage_attention_scores(model, ids, encoded.token_spans, layers=layers)

        # Each variant ``repeats`` times, interleaved; the fastest time and the largest peak of each are kept.
        samples = {"plain": [], "all": [], "filter": []}
        for _ in range(repeats):
            for name, fn in (("plain", plain), ("all", probe_all), ("filter", filter_heads)):
                samples[name].append(measure(fn))
        t_plain, m_plain = min(t for t, _ in samples["plain"]), max(m for _, m in samples["plain"])
        t_all, m_all = min(t for t, _ in samples["all"]), max(m for _, m in samples["all"])
        t_filter, m_filter = min(t for t, _ in samples["filter"]), max(m for _, m in samples["filter"])
        rows.append(
            {
                "target_tokens": target,
                "tokens": int(ids.shape[1]),
                "passages": len(encoded.token_spans),
                "plain_s": t_plain,
                "rap_all_heads_s": t_all,
                "rap_filter_s": t_filter,
                "plain_peak_mb": m_plain / 2**20,
                "rap_all_heads_peak_mb": m_all / 2**20,
                "rap_filter_peak_mb": m_filter / 2**20,
                "time_ratio_all_heads": t_all / t_plain,
                "time_ratio_filter": t_filter / t_plain,
                "memory_ratio_all_heads": (m_all / m_plain) if m_plain > 0 else float("nan"),
                "memory_ratio_filter": (m_filter / m_plain) if m_plain > 0 else float("nan"),
                "repeats": repeats,
                "all_samples": {name: [[round(t, 3), m] for t, m in v] for name, v in samples.items()},
            }
        )
        # Each length is printed as it completes: the 8K point takes minutes on a shared 2-core machine.
        tqdm.write(
            json.dumps({key: round(value, 3) if isinstance(value, float) else value for key, value in rows[-1].items()})
        )
    return rows


def bench_quality(model, tokenizer, artifact_path: Path, held, minilm, m: int, q: int, max_new_tokens: int) -> dict:
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from icr2_components.builders import CorpusInContextPromptBuilder
    from icr2_components.filters import RetrievalAttentionFilter
    from icr2_components.readers import LocalChatReader

    rap = RetrievalAttentionFilter(
        artifact=str(artifact_path), model=MODEL, top_m=m, num_heads=q, dtype="float32", device="cpu"
    )
    reader = LocalChatReader(model=MODEL, max_new_tokens=max_new_tokens, dtype="float32", device="cpu")
    prompt = CorpusInContextPromptBuilder(task_type="qa")
    rap.warm_up()
    reader.warm_up()
    assert rap._model is reader.chat_model.model, "the filter and the reader must share one model"
    totals = {"rap": 0.0, "bm25": 0.0, "minilm": 0.0, "rap_at_m": 0.0, "bm25_at_m": 0.0, "minilm_at_m": 0.0,
              "kept": 0.0, "vanilla": 0, "rap_answer": 0, "oracle": 0}
    for instance in tqdm(held, desc="recall and accuracy (held-apart)"):
        gold = set(instance.gold_passage_ids)
        ids = [d.meta["passage_id"] for d in instance.documents]
        kept = rap.run(documents=instance.documents, query=instance.query)["documents"]
        kept_ids = [d.meta["passage_id"] for d in kept]
        k = len(kept_ids)
        store = InMemoryDocumentStore()
        store.write_documents(instance.documents)
        bm25 = [
            d.meta["passage_id"]
            for d in InMemoryBM25Retriever(store, top_k=len(ids)).run(query=instance.query)["documents"]
        ]
        query_vec = minilm.encode([instance.query], normalize_embeddings=True)
        doc_vecs = minilm.encode(
            [f"{d.meta.get('title', '')} {d.content}" for d in instance.documents], normalize_embeddings=True
        )
        order = (doc_vecs @ query_vec[0]).argsort()[::-1]
        dense = [ids[i] for i in order]

        def recall(chosen, gold=gold):
            return len(gold & set(chosen)) / len(gold)

        rap_scores = sorted(kept, key=lambda d: -d.meta["rap_score"])
        totals["rap"] += recall(kept_ids)
        totals["bm25"] += recall(bm25[:k])
        totals["minilm"] += recall(dense[:k])
        totals["rap_at_m"] += recall([d.meta["passage_id"] for d in rap_scores[:m]])
        totals["bm25_at_m"] += recall(bm25[:m])
        totals["minilm_at_m"] += recall(dense[:m])
        totals["kept"] += k
        for name, documents in (("vanilla", instance.documents), ("rap_answer", kept),
                                ("oracle", [d for d in instance.documents if d.meta["passage_id"] in gold])):
            reply = reader.run(messages=prompt.run(query=instance.query, documents=documents)["prompt"])["replies"][
                0
            ].text
            totals[name] += int(answer_match(reply, instance.answers))  # the project's answer match
    n = len(held)
    return {key: value / n for key, value in totals.items()} | {
        "instances": n,
        "passages_per_context": len(held[0].documents),
    }


def plot(overhead: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    tokens = [row["tokens"] for row in overhead]
    for key, label in (
        ("plain", "plain forward"),
        ("rap_all_heads", "RAP all heads"),
        ("rap_filter", "RAP filter heads"),
    ):
        left.plot(tokens, [row[f"{key}_s"] for row in overhead], marker="o", label=label)
        right.plot(tokens, [row[f"{key}_peak_mb"] for row in overhead], marker="o", label=label)
    left.set(xlabel="prompt tokens", ylabel="seconds", title="time (SmolLM2, 2-core CPU)")
    right.set(xlabel="prompt tokens", ylabel="peak RSS growth (MiB)", title="peak memory")
    left.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="*", default=[2048, 4096, 8192])
    parser.add_argument("--probe", type=int, default=20, help="instances to probe heads on")
    parser.add_argument("--eval", type=int, default=20, help="held-apart instances for recall and accuracy")
    parser.add_argument("--passages", type=int, default=4, help="passages per CiC instance")
    parser.add_argument(
        "--query-position", default="generated_tokens", choices=["last_prompt_token", "generated_tokens"]
    )
    parser.add_argument("--aggregate", default="mean", choices=["sum", "mean", "max"])
    parser.add_argument("--m", type=int, default=1)
    parser.add_argument("--q", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument(
        "--parts",
        nargs="*",
        default=["quality", "overhead"],
        choices=["quality", "overhead"],
        help="run one part per process to run them side by side (each writes bench/results/rap_<part>.json)",
    )
    parser.add_argument("--repeats", type=int, default=2, help="measurements per variant and length (fastest kept)")
    parser.add_argument("--artifact", default=str(RESULTS / "rap_heads_smollm2.json"))
    args = parser.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    RESULTS.mkdir(parents=True, exist_ok=True)
    model, tokenizer = MODEL_CACHE.causal_lm(MODEL, dtype="float32", device="cpu")
    quality, overhead, probe = {}, [], []
    if "quality" in args.parts:
        instances = nq_sample_instances(args.probe + args.eval, passages=args.passages)
        probe, held = split_instances(instances, args.probe, seed=0)
        probe_to_artifact(
            probe,
            MODEL,
            m=args.m,
            q=args.q,
            max_m=4,
            query_position_mode=args.query_position,
            aggregate=args.aggregate,
            dtype="float32",
            device="cpu",
            artifact_path=args.artifact,
            heatmap_path=RESULTS / "rap_heads_smollm2.png",
        )
        quality = bench_quality(
            model,
            tokenizer,
            Path(args.artifact),
            held,
            MODEL_CACHE.sentence_transformer("all-minilm-l6-v2", device="cpu"),
            args.m,
            args.q,
            args.max_new_tokens,
        )
    artifact = RetrievalHeadArtifact.load(args.artifact)
    if "overhead" in args.parts and args.lengths:
        overhead = bench_overhead(model, tokenizer, args.lengths, artifact.top_heads(), args.repeats)

    console = Console(width=160)
    table = Table(title="RAP scoring vs plain forward (same input, same run; SmolLM2-135M fp32, CPU)")
    for column in (
        "tokens",
        "passages",
        "plain s",
        "all-heads s",
        "ratio",
        "filter s",
        "ratio",
        "plain MiB",
        "all-heads MiB",
        "ratio",
        "filter MiB",
        "ratio",
    ):
        table.add_column(column, justify="right")
    for row in overhead:
        table.add_row(
            str(row["tokens"]),
            str(row["passages"]),
            f"{row['plain_s']:.2f}",
            f"{row['rap_all_heads_s']:.2f}",
            f"{row['time_ratio_all_heads']:.2f}x",
            f"{row['rap_filter_s']:.2f}",
            f"{row['time_ratio_filter']:.2f}x",
            f"{row['plain_peak_mb']:.0f}",
            f"{row['rap_all_heads_peak_mb']:.0f}",
            f"{row['memory_ratio_all_heads']:.2f}x",
            f"{row['rap_filter_peak_mb']:.0f}",
            f"{row['memory_ratio_filter']:.2f}x",
        )
    console.print(table)
    if quality:
        kept = quality["kept"]
        table = Table(
            title=f"Held-apart NQ-sample CiC ({quality['instances']} x {quality['passages_per_context']} passages; "
            f"heads probed on {len(probe)} others)"
        )
        for column in ("measure", "RAP", "BM25", "MiniLM", "vanilla CiC", "oracle"):
            table.add_column(column, justify="right")
        table.add_row(
            f"recall @ RAP's set (mean {kept:.2f} passages)",
            f"{quality['rap']:.2f}",
            f"{quality['bm25']:.2f}",
            f"{quality['minilm']:.2f}",
            "",
            "",
        )
        table.add_row(
            f"recall @ M={args.m}",
            f"{quality['rap_at_m']:.2f}",
            f"{quality['bm25_at_m']:.2f}",
            f"{quality['minilm_at_m']:.2f}",
            "",
            "",
        )
        table.add_row(
            "answer accuracy (match)",
            f"{quality['rap_answer']:.2f}",
            "",
            "",
            f"{quality['vanilla']:.2f}",
            f"{quality['oracle']:.2f}",
        )
        console.print(table)
        console.print(
            f"chance recall @ M={args.m}: {args.m / quality['passages_per_context']:.2f}; heads: {artifact.heads} "
            f"(probe hit rates {[round(artifact.head_hit_rate(layer, h), 2) for layer, h in artifact.top_heads()]})"
        )
    output = {
        "machine": f"{psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, CPU only",
        "args": vars(args),
        "overhead": overhead,
        "quality": quality,
        "heads": artifact.heads,
        "memory_method": "VmHWM (reset via /proc/self/clear_refs) minus pre-call VmRSS, after gc and malloc_trim, "
        "MALLOC_MMAP_THRESHOLD_=131072",
    }
    written = RESULTS / f"rap_{'_'.join(args.parts)}.json"
    written.write_text(json.dumps(output, indent=1))
    if overhead:
        plot(overhead, RESULTS / "rap_overhead.png")
    print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
