"""Bad inputs through the real `icr2` command: what each gets (exit status, the one error line, or what was skipped).

Each case writes a real bad file (or points at a dead port, or sends an over-long query) and runs the installed
CLI in a subprocess, as a user would. The table goes to stdout and to ``bench/results/bad_inputs.md``, the
records to ``bench/results/bad_inputs.json``. The Elasticsearch cases need the project's node
(``bash scripts/elasticsearch.sh start``; ``ICR2_ES_URL`` to point elsewhere).

    .venv/bin/python bench/bad_inputs.py
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tqdm import tqdm  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ICR2 = [sys.executable, "-m", "icr2_components.cli"]
ES_URL = os.environ.get("ICR2_ES_URL", "http://127.0.0.1:9200")


def article(wikipedia_id, title: str, *paragraphs) -> bytes:
    return json.dumps({"wikipedia_id": wikipedia_id, "wikipedia_title": title, "text": [title, *paragraphs]}).encode()


def words(prefix: str, n: int) -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


def corpus_bytes(n: int = 6) -> list[bytes]:
    return [article(str(i), f"Article {i}", words(f"a{i}w", 120)) for i in range(n)]


def index_config(tmp: Path, name: str, corpus: str, *, es: bool = False, extra: str = "") -> Path:
    store = (
        f"store: {{type: elasticsearch, hosts: '{ES_URL}', index: icr2-bad-{name}-{uuid.uuid4().hex[:6]}, max_retries: "
        "0, request_timeout: 10}"
        if es
        else f"store: {{type: in_memory, persist_path: '{tmp / (name + '.json')}'}}"
    )
    path = tmp / f"{name}.yaml"
    path.write_text(f"name: {name}\n{store}\ncorpus: {{path: '{corpus}'}}\nembedding: {{enabled: false}}\n"
                    f"writer: {{checkpoint_path: '{tmp / (name + '.ckpt.json')}'}}\n{extra}")
    return path


def cases(tmp: Path) -> list[tuple[str, list[str]]]:
    """(what was tried, icr2 arguments) for each bad input; files are written here."""
    out: list[tuple[str, list[str]]] = []

    def corpus(name: str, lines: list[bytes], *, gz: bool = False) -> Path:
        path = tmp / (name + (".jsonl.gz" if gz else ".jsonl"))
        data = b"\n".join(lines) + b"\n"
        path.write_bytes(gzip.compress(data) if gz else data)
        return path

    dup = corpus(
        "duplicate", corpus_bytes()[:3] + [article("1", "Article 1 again", words("zzz", 300))] + corpus_bytes()[3:]
    )
    out.append(
        (
            "two KILT records with the same wikipedia_id (in memory)",
            ["index", "--config", str(index_config(tmp, "dup", dup)), "--no-progress"],
        )
    )
    out.append(
        (
            "two KILT records with the same wikipedia_id (Elasticsearch)",
            ["index", "--config", str(index_config(tmp, "dupes", dup, es=True)), "--no-progress"],
        )
    )
    lines = corpus_bytes()
    lines[2] = lines[2].replace(b"a2w5 ", b"caf\xff ")
    bad_byte = corpus("bad_byte", lines)
    out.append(
        (
            "a byte 0xff that is not UTF-8 in line 3 (Elasticsearch)",
            ["index", "--config", str(index_config(tmp, "badbyte", bad_byte, es=True)), "--no-progress"],
        )
    )
    bom = corpus("bom", [b"\xef\xbb\xbf" + corpus_bytes()[0]] + corpus_bytes()[1:])
    out.append(
        (
            "a UTF-8 byte-order mark on the first line",
            ["index", "--config", str(index_config(tmp, "bom", bom)), "--no-progress"],
        )
    )
    fake_gz = tmp / "fake.jsonl.gz"
    fake_gz.write_bytes(b"\n".join(corpus_bytes()) + b"\n")
    out.append(
        (
            "a .gz file that is not gzip",
            ["index", "--config", str(index_config(tmp, "fakegz", fake_gz)), "--no-progress"],
        )
    )
    real_gz = corpus("cut", corpus_bytes(400), gz=True)
    cut_gz = tmp / "cut_short.jsonl.gz"
    cut_gz.write_bytes(real_gz.read_bytes()[: real_gz.stat().st_size // 2])
    out.append(
        ("a gzip file cut short", ["index", "--config", str(index_config(tmp, "cutgz", cut_gz)), "--no-progress"])
    )
    typed = corpus(
        "typed",
        [
            json.dumps({"wikipedia_id": "1", "wikipedia_title": 5, "text": ["x", "y"]}).encode(),
            json.dumps({"wikipedia_id": "2", "wikipedia_title": "B", "text": ["B", 42, "kept"]}).encode(),
        ],
    )
    out.append(
        (
            "a numeric title; a paragraph that is a number",
            ["index", "--config", str(index_config(tmp, "typed", typed)), "--no-progress"],
        )
    )
    empty = corpus("empty", [])
    empty.write_bytes(b"")
    out.append(("an empty corpus file", ["index", "--config", str(index_config(tmp, "empty", empty)), "--no-progress"]))
    good = corpus("good", corpus_bytes())
    for label, extra_key in (
        ("`embedding.enabled: \"false\"` (a string)", "embedding: {enabled: 'false'}"),
        ("`passage_words: \"one hundred\"`", "corpus: {path: sample, passage_words: 'one hundred'}"),
        ("`passage_words: 100.7`", "corpus: {path: sample, passage_words: 100.7}"),
    ):
        path = tmp / f"typed-{len(out)}.yaml"
        section = extra_key.split(":")[0]
        base = {
            "store": "store: {type: in_memory}",
            "corpus": f"corpus: {{path: '{good}'}}",
            "embedding": "embedding: {enabled: false}",
        }
        base[section] = extra_key
        path.write_text("name: typed\n" + "\n".join(base.values()) + "\n")
        out.append((f"index config with {label}", ["index", "--config", str(path), "--no-progress"]))
    no_sections = tmp / "no_sections.yaml"
    no_sections.write_text("name: nothing\nembedding: {enabled: false}\n")
    out.append(("index config with no store/corpus section", ["index", "--config", str(no_sections), "--no-progress"]))
    syntax = tmp / "syntax.yaml"
    syntax.write_text("store:\n  type: in_memory\ncorpus: [path: sample\n")
    out.append(("a YAML syntax error in an index config", ["index", "--config", str(syntax), "--no-progress"]))
    dead = tmp / "dead.yaml"
    dead.write_text(
        "name: dead\nstore: {type: elasticsearch, hosts: 'http://127.0.0.1:9', index: x, max_retries: 0, "
        "request_timeout: 2}\n"
        "corpus: {path: sample}\nembedding: {enabled: false}\n"
    )
    out.append(
        (
            "Elasticsearch down during `icr2 search`",
            ["search", "--config", str(dead), "-q", "nobel prize", "--method", "bm25"],
        )
    )
    never = index_config(tmp, "never", "sample", es=True)
    out.append(
        (
            "`icr2 search` on an Elasticsearch index never built",
            ["search", "--config", str(never), "-q", "nobel prize", "--method", "bm25"],
        )
    )
    built = index_config(tmp, "built", str(good), es=True)
    out.append(
        (
            "(setup: index a good 6-article corpus into Elasticsearch)",
            ["index", "--config", str(built), "--no-progress"],
        )
    )
    long_query = " ".join(f"w{i:05d}" for i in range(17_000))
    out.append(
        (
            f"a {len(long_query):,}-character query to Elasticsearch",
            ["search", "--config", str(built), "-q", long_query, "--method", "bm25"],
        )
    )
    empty_store = tmp / "empty_store.json"
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from icr2_components.stores import IndexHandle, load_index_config

    empty_index = tmp / "empty_index.yaml"
    empty_index.write_text(
        f"name: e\nstore: {{type: in_memory, persist_path: '{empty_store}'}}\ncorpus: {{path: sample}}\n"
    )
    # an index file of this config holding nothing (the store names the config it was built from)
    InMemoryDocumentStore(index=IndexHandle(load_index_config(empty_index)).backend.index_name).save_to_disk(str(empty_store))
    out.append(
        (
            "dense search on an empty index",
            ["search", "--config", str(empty_index), "-q", "nobel prize", "--method", "dense"],
        )
    )
    gate = tmp / "gate.jsonl"
    gate.write_text("\n".join(json.dumps(r) for r in (
        {"question": "What is the capital of France?", "ground_truth": ["Paris"], "needs_retrieval": False},
        {"question": "Who won the 2031 election?", "ground_truth": ["nobody"], "needs_retrieval": "false"},
        {"question": "How many legs has a spider?", "ground_truth": 8, "needs_retrieval": False},
    )) + "\n")
    out.append(
        (
            'eval-gate file with `needs_retrieval: "false"` and `ground_truth: 8`',
            ["eval-gate", str(gate), "--method", "always", "--max-new-tokens", "8", "--decisions-only"],
        )
    )
    out.append(
        (
            "a model name that does not exist",
            ["eval-gate", str(gate), "--model", "no-such-org/no-such-model", "--decisions-only"],
        )
    )
    recipe = tmp / "recipe.yaml"
    recipe.write_text(
        (REPO / "training" / "smollm2_cpu_rta.yaml").read_text().replace("training:", "training:\n  bf16: 'false'", 1)
    )
    out.append(("training recipe with `bf16: \"false\"`", ["train", "--config", str(recipe)]))
    out.append(
        (
            "`pipelines/fine_tuned_reader.yaml` before training",
            ["compare", "--pipelines", "pipelines/fine_tuned_reader.yaml", "--limit", "1", "--out", str(tmp / "cmp")],
        )
    )
    bad_pipeline = tmp / "bad_pipeline.yaml"
    bad_pipeline.write_text("components:\n  reader:\n    type: [icr2_components.readers.LocalChatReader\n")
    out.append(
        (
            "a YAML syntax error in a pipeline",
            ["compare", "--pipelines", str(bad_pipeline), "--limit", "1", "--out", str(tmp / "cmp2")],
        )
    )
    out += round_two(tmp, good, built, never)
    return out


def round_two(tmp: Path, good: Path, built: Path, never: Path) -> list[tuple[str, list[str]]]:
    """Issue 27: inputs that gave a wrong result and exit 0, or a misleading message."""
    out: list[tuple[str, list[str]]] = []
    no_path = tmp / "no_path.yaml"
    no_path.write_text(f"name: nopath\nstore: {{type: in_memory, persist_path: '{tmp / 'nopath.json'}'}}\n"
                       "corpus: {passage_words: 50}\nembedding: {enabled: false}\n")
    out.append(("index config whose corpus section has no path", ["index", "--config", str(no_path), "--no-progress"]))
    explicit = tmp / "explicit.yaml"
    stale = (
        f"name: explicit\nstore: {{type: in_memory, persist_path: '{tmp / 'explicit.json'}'}}\n"
        "embedding: {enabled: false}\n"
    )
    explicit.write_text(stale + f"corpus: {{path: '{good}', passage_words: 100}}\n")
    out.append(
        (
            "(setup: index 100-word passages at an explicit persist_path)",
            ["index", "--config", str(explicit), "--no-progress"],
        )
    )
    changed = tmp / "explicit_changed.yaml"
    changed.write_text(stale + f"corpus: {{path: '{good}', passage_words: 20}}\n")
    out.append(
        (
            "search the same persist_path after passage_words 100 -> 20",
            ["search", "--config", str(changed), "-q", "a1w5", "--method", "bm25"],
        )
    )
    label = {"key": "k", "id": "q", "question": "Who?", "answers": ["A"], "source": "nq", "reader": "r",
             "closed_book_match": False, "context_match": True, "outcome": "context_only"}
    labels = tmp / "labels.jsonl"
    labels.write_text(
        "\n".join(
            [
                json.dumps({**label, "key": "k1", "id": "q1"}),
                json.dumps({**label, "key": "k2", "id": "q2", "closed_book_match": True, "outcome": "both_right"}),
                json.dumps({**label, "key": "k3", "id": "q3", "closed_book_match": "false"}),
                '{"key": "k4", "id": "q4", "closed_bo',
            ]
        )
        + "\n"
    )
    out.append(
        (
            'labels with `closed_book_match: "false"` and a cut line',
            ["eval-gate", "--labels", str(labels), "--methods", "always,never"],
        )
    )
    contexts = tmp / "gate_context.jsonl"
    contexts.write_text("\n".join(json.dumps(r) for r in (
        {"question": "What is the capital of France?", "ground_truth": ["Paris"], "context": ["Paris is the capital."]},
        {"question": "How many legs has a spider?", "ground_truth": ["8"], "context": [8, None]},
    )) + "\n")
    out.append(
        (
            "eval-gate record whose context holds non-strings",
            ["eval-gate", str(contexts), "--method", "always", "--max-new-tokens", "8", "--decisions-only"],
        )
    )
    empty_model = tmp / "not-a-model"
    empty_model.mkdir()
    broken = tmp / "broken_reader.yaml"
    broken.write_text(
        (REPO / "pipelines" / "closed_book.yaml")
        .read_text()
        .replace("model: smollm2-135m-instruct", f"model: '{empty_model}'")
    )
    out.append(
        (
            "`icr2 compare` with a reader that cannot load",
            [
                "compare",
                "--pipelines",
                str(broken),
                "--limit",
                "2",
                "--context-types",
                "open",
                "--out",
                str(tmp / "cmp3"),
            ],
        )
    )
    other = tmp / "other.jsonl"
    other.write_bytes(b"\n".join(article(f"o{i}", f"Other {i}", words(f"o{i}w", 120)) for i in range(3)) + b"\n")
    second = tmp / "second_corpus.yaml"
    second.write_text(built.read_text().replace(str(good), str(other)).replace("name: built", "name: second")
                      .replace("built.ckpt.json", "second.ckpt.json"))
    out.append(
        ("a second corpus into the built Elasticsearch index", ["index", "--config", str(second), "--no-progress"])
    )
    out.append(
        (
            "hybrid search on an Elasticsearch index never built",
            ["search", "--config", str(never), "-q", "nobel prize", "--method", "hybrid"],
        )
    )
    tpu = tmp / "tpu.yaml"
    tpu.write_text((REPO / "training" / "smollm2_cpu_rta.yaml").read_text().replace("device: cpu", "device: tpu", 1))
    out.append(("training recipe with `device: tpu`", ["train", "--config", str(tpu)]))
    return out


def outcome(result: subprocess.CompletedProcess) -> str:
    """The line a user reads: the error line, or the index/search summary."""
    err = [line for line in result.stderr.splitlines() if line.startswith("icr2 ")]
    if result.returncode != 0:
        text = err[-1] if err else (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        return text if len(text) <= 400 else text[:397] + "..."
    skipped = [
        line.strip() for line in result.stdout.splitlines() if line.startswith("skipped:") or ": skipped " in line
    ]
    if skipped:
        return skipped[0][:400]
    rows = [line for line in result.stdout.splitlines() if "│" in line and any(c.isdigit() for c in line)]
    cells = [c.strip() for c in rows[0].strip("│ ").split("│")] if rows else []
    if len(cells) == 8 and cells[0] in ("in_memory", "elasticsearch"):  # the `icr2 index` table
        return (
            f"indexed: {cells[2]} passages streamed, {cells[3]} in the store, {cells[5]} skipped, {cells[6]} rejected"
        )
    return (rows[0].strip() if rows else result.stdout.strip()[-200:]).replace("│", "|")[:400]


def _delete_bench_indexes() -> None:
    """Delete the icr2-bad-* indexes this run made (by name: Elasticsearch 8 refuses wildcard deletes)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"{ES_URL}/_cat/indices/icr2-bad-*?format=json", timeout=30) as response:
            names = [row["index"] for row in json.loads(response.read())]
        for name in names:
            urllib.request.urlopen(urllib.request.Request(f"{ES_URL}/{name}", method="DELETE"), timeout=30).read()
    except OSError as error:
        print(f"(could not delete the icr2-bad-* indexes: {error})")


def main() -> int:
    results = []
    with tempfile.TemporaryDirectory(prefix="icr2-bad-") as folder:
        tmp = Path(folder)
        tried = cases(tmp)
        for what, argv in tqdm(tried, desc="bad inputs", unit=" case"):
            start = time.perf_counter()
            result = subprocess.run(ICR2 + argv, capture_output=True, text=True, cwd=REPO, timeout=600)
            traceback = "Traceback" in result.stderr
            results.append(
                {
                    "input": what,
                    "exit": result.returncode,
                    "traceback": traceback,
                    "stderr_lines": len([line for line in result.stderr.splitlines() if line.startswith("icr2 ")]),
                    "outcome": outcome(result),
                    "seconds": round(time.perf_counter() - start, 1),
                }
            )
        _delete_bench_indexes()
        for r in results:
            r["outcome"] = r["outcome"].replace(folder, "<tmp>")
    lines = ["| bad input | exit | what the user gets |", "|---|---|---|"]
    for r in results:
        shown = r["outcome"].replace("|", "\\|")
        lines.append(f"| {r['input']} | {r['exit']}{' (traceback!)' if r['traceback'] else ''} | {shown} |")
    table = "\n".join(lines)
    print(table)
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bad_inputs.json").write_text(json.dumps(results, indent=2))
    (out / "bad_inputs.md").write_text(table + "\n")
    tracebacks = [r["input"] for r in results if r["traceback"]]
    print(
        f"\n{len(results)} inputs tried, {len(tracebacks)} with a traceback" + (f": {tracebacks}" if tracebacks else "")
    )
    return 1 if tracebacks else 0


if __name__ == "__main__":
    sys.exit(main())
