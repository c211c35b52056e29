"""Bad inputs through the real ``icr2`` command: each case writes a real bad file (or points at a dead port, a
server answering garbage or every request with 503, sends an over-long query) and runs the installed CLI in a
subprocess, as a user would. The shipped Elasticsearch config runs on a fresh, empty cache folder."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import numpy as np
import yaml

from bad_input_cases.common import (
    ES_URL,
    ICR2,
    REPO,
    Case,
    article,
    both,
    corpus_bytes,
    es_contents,
    es_contents_of_index,
    es_index_of,
    holds,
    in_memory_contents,
    llama_backend,
    no_file,
    output_says,
    words,
)
from icr2_components.testing import FixedAnswerServer


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


def index_argv(config: Path) -> list[str]:
    """`icr2 index` with its JSON report beside the config (the checks read it)."""
    return ["index", "--config", str(config), "--no-progress", "--report", str(config.with_suffix(".report.json"))]


def report_of(config: Path) -> dict:
    path = config.with_suffix(".report.json")
    return json.loads(path.read_text()) if path.is_file() else {}



# -- the cases -----------------------------------------------------------------------------------------------


def cases(tmp: Path) -> list[Case]:
    """Each bad input, its files written here."""
    out: list[Case] = []

    def corpus(name: str, lines: list[bytes], *, gz: bool = False) -> Path:
        path = tmp / (name + (".jsonl.gz" if gz else ".jsonl"))
        data = b"\n".join(lines) + b"\n"
        path.write_bytes(gzip.compress(data) if gz else data)
        return path

    # 6 articles of 120 words: 2 passages each at the default 100 words per passage
    dup = corpus(
        "duplicate", [*corpus_bytes()[:3], article("1", "Article 1 again", words("zzz", 300)), *corpus_bytes()[3:]]
    )
    dup_mem = index_config(tmp, "dup", dup)
    out.append(Case("two KILT records with the same wikipedia_id (in memory)", index_argv(dup_mem),
                    right=both(output_says('"duplicate wikipedia_id (first record kept)": 1'),
                               holds(lambda: in_memory_contents(tmp / "dup.json"), 12, ("a1w5",), ("zzz1 ",)))))
    dup_es = index_config(tmp, "dupes", dup, es=True)
    out.append(Case("two KILT records with the same wikipedia_id (Elasticsearch)", index_argv(dup_es),
                    right=both(output_says('"duplicate wikipedia_id (first record kept)": 1'),
                               holds(lambda: es_contents(dup_es), 12, ("a1w5",), ("zzz1 ",)))))
    lines = corpus_bytes()
    lines[2] = lines[2].replace(b"a2w5 ", b"caf\xff ")
    bad_byte = corpus("bad_byte", lines)
    badbyte = index_config(tmp, "badbyte", bad_byte, es=True)
    out.append(Case("a byte 0xff that is not UTF-8 in line 3 (Elasticsearch)", index_argv(badbyte),
                    right=both(output_says('"not UTF-8": 1', "line 3"),
                               holds(lambda: es_contents(badbyte), 10, ("a3w5",), ("a2w5",)))))
    bom = corpus("bom", [b"\xef\xbb\xbf" + corpus_bytes()[0], *corpus_bytes()[1:]])
    out.append(Case("a UTF-8 byte-order mark on the first line", index_argv(index_config(tmp, "bom", bom)),
                    right=holds(lambda: in_memory_contents(tmp / "bom.json"), 12, ("a0w5", "a5w5"), ("\ufeff",))))
    fake_gz = tmp / "fake.jsonl.gz"
    fake_gz.write_bytes(b"\n".join(corpus_bytes()) + b"\n")
    out.append(Case("a .gz file that is not gzip", index_argv(index_config(tmp, "fakegz", fake_gz)),
                    says=("fake.jsonl.gz", "not gzip")))
    real_gz = corpus("cut", corpus_bytes(400), gz=True)
    cut_gz = tmp / "cut_short.jsonl.gz"
    cut_gz.write_bytes(real_gz.read_bytes()[: real_gz.stat().st_size // 2])
    out.append(Case("a gzip file cut short", index_argv(index_config(tmp, "cutgz", cut_gz)),
                    says=("cut_short.jsonl.gz", "damaged")))
    typed = corpus(
        "typed",
        [
            json.dumps({"wikipedia_id": "1", "wikipedia_title": 5, "text": ["x", "y"]}).encode(),
            json.dumps({"wikipedia_id": "2", "wikipedia_title": "B", "text": ["B", 42, "kept"]}).encode(),
        ],
    )
    out.append(Case("a numeric title; a paragraph that is a number", index_argv(index_config(tmp, "typed", typed)),
                    right=both(output_says('"wikipedia_title is not a string": 1', '"paragraph is not a string": 1'),
                               holds(lambda: in_memory_contents(tmp / "typed.json"), 1, ("kept",), ("42",)))))
    empty = corpus("empty", [])
    empty.write_bytes(b"")
    out.append(Case("an empty corpus file", index_argv(index_config(tmp, "empty", empty)),
                    says=("empty.jsonl", "no passage")))
    good = corpus("good", corpus_bytes())
    for label, extra_key, key in (
        ("`embedding.enabled: \"false\"` (a string)", "embedding: {enabled: 'false'}", "enabled"),
        ("`passage_words: \"one hundred\"`", "corpus: {path: sample, passage_words: 'one hundred'}", "passage_words"),
        ("`passage_words: 100.7`", "corpus: {path: sample, passage_words: 100.7}", "passage_words"),
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
        out.append(Case(f"index config with {label}", ["index", "--config", str(path), "--no-progress"],
                        says=(path.name, key)))
    no_sections = tmp / "no_sections.yaml"
    no_sections.write_text("name: nothing\nembedding: {enabled: false}\n")
    out.append(Case("index config with no store/corpus section", ["index", "--config", str(no_sections),
                                                                   "--no-progress"], says=("no 'store' or 'corpus'",)))
    syntax = tmp / "syntax.yaml"
    syntax.write_text("store:\n  type: in_memory\ncorpus: [path: sample\n")
    out.append(Case("a YAML syntax error in an index config", ["index", "--config", str(syntax), "--no-progress"],
                    says=("syntax.yaml", "line 4")))
    dead = tmp / "dead.yaml"
    dead.write_text(
        "name: dead\nstore: {type: elasticsearch, hosts: 'http://127.0.0.1:9', index: x, max_retries: 0, "
        "request_timeout: 2}\n"
        "corpus: {path: sample}\nembedding: {enabled: false}\n"
    )
    out.append(Case("Elasticsearch down during `icr2 search`",
                    ["search", "--config", str(dead), "-q", "nobel prize", "--method", "bm25"],
                    says=("unreachable", "127.0.0.1:9", "elasticsearch.sh start")))
    never = index_config(tmp, "never", "sample", es=True)
    out.append(Case("`icr2 search` on an Elasticsearch index never built",
                    ["search", "--config", str(never), "-q", "nobel prize", "--method", "bm25"],
                    says=(es_index_of(never), "icr2 index")))
    built = index_config(tmp, "built", str(good), es=True)
    out.append(Case("(setup: index a good 6-article corpus into Elasticsearch)", index_argv(built), setup=True,
                    right=holds(lambda: es_contents(built), 12, ("a0w5", "a5w5"))))
    long_query = " ".join(f"w{i:05d}" for i in range(17_000))
    out.append(Case(f"a {len(long_query):,}-character query to Elasticsearch",
                    ["search", "--config", str(built), "-q", long_query, "--method", "bm25"],
                    says=("too long", "Shorten the query"), not_says=("allows 0",)))
    empty_store = tmp / "empty_store.json"
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from icr2_components.stores import IndexHandle, load_index_config

    empty_index = tmp / "empty_index.yaml"
    empty_index.write_text(
        f"name: e\nstore: {{type: in_memory, persist_path: '{empty_store}'}}\ncorpus: {{path: sample}}\n"
    )
    # an index file of this config holding nothing (the store names the config it was built from)
    InMemoryDocumentStore(index=IndexHandle(load_index_config(empty_index)).backend.index_name).save_to_disk(str(empty_store))
    out.append(Case("dense search on an empty index",
                    ["search", "--config", str(empty_index), "-q", "nobel prize", "--method", "dense"],
                    says=("holds no passages", "icr2 index")))
    gate = tmp / "gate.jsonl"
    gate.write_text("\n".join(json.dumps(r) for r in (
        {"question": "What is the capital of France?", "ground_truth": ["Paris"], "needs_retrieval": False},
        {"question": "Who won the 2031 election?", "ground_truth": ["nobody"], "needs_retrieval": "false"},
        {"question": "How many legs has a spider?", "ground_truth": 8, "needs_retrieval": False},
    )) + "\n")
    out.append(Case('eval-gate file with `needs_retrieval: "false"` and `ground_truth: 8`',
                    ["eval-gate", str(gate), "--method", "always", "--max-new-tokens", "8", "--decisions-only"],
                    right=output_says("skipped 2 (2 wrongly typed field)")))
    out.append(Case("a model name that does not exist",
                    ["eval-gate", str(gate), "--model", "no-such-org/no-such-model", "--decisions-only"],
                    says=("no-such-org/no-such-model", "bundled alias")))
    recipe = tmp / "recipe.yaml"
    recipe.write_text(
        (REPO / "training" / "smollm2_cpu_rta.yaml").read_text().replace("training:", "training:\n  bf16: 'false'", 1)
    )
    out.append(Case("training recipe with `bf16: \"false\"`", ["train", "--config", str(recipe)],
                    says=("recipe.yaml", "bf16", "expected a boolean")))
    out.append(Case("`pipelines/fine_tuned_reader.yaml` before training",
                    ["compare", "--pipelines", "pipelines/fine_tuned_reader.yaml", "--limit", "1", "--out",
                     str(tmp / "cmp")],
                    says=("fine_tuned_reader.yaml", "icr2 train")))
    bad_pipeline = tmp / "bad_pipeline.yaml"
    bad_pipeline.write_text("components:\n  reader:\n    type: [icr2_components.readers.LocalChatReader\n")
    out.append(Case("a YAML syntax error in a pipeline",
                    ["compare", "--pipelines", str(bad_pipeline), "--limit", "1", "--out", str(tmp / "cmp2")],
                    says=("bad_pipeline.yaml", "not valid YAML")))
    out += once_silently_wrong(tmp, good, built, never)
    from bad_input_cases import cli_run_cases

    (tmp / "run").mkdir(exist_ok=True)
    out += cli_run_cases.cases(tmp / "run")
    return out


def once_silently_wrong(tmp: Path, good: Path, built: Path, never: Path) -> list[Case]:
    """Inputs that once gave a wrong result and exit 0, or a misleading message."""
    out: list[Case] = []
    no_path = tmp / "no_path.yaml"
    no_path.write_text(f"name: nopath\nstore: {{type: in_memory, persist_path: '{tmp / 'nopath.json'}'}}\n"
                       "corpus: {passage_words: 50}\nembedding: {enabled: false}\n")
    # exit 0 would mean it indexed the bundled sample instead: wrong whatever it printed
    out.append(Case("index config whose corpus section has no path", index_argv(no_path),
                    says=("no_path.yaml", "no 'path'", "path: sample")))

    explicit = tmp / "explicit.yaml"
    stale = (
        f"name: explicit\nstore: {{type: in_memory, persist_path: '{tmp / 'explicit.json'}'}}\n"
        "embedding: {enabled: false}\n"
    )
    explicit.write_text(stale + f"corpus: {{path: '{good}', passage_words: 100}}\n")
    out.append(Case("(setup: index 100-word passages at an explicit persist_path)", index_argv(explicit), setup=True,
                    right=holds(lambda: in_memory_contents(tmp / "explicit.json"), 12, ("a1w5",))))
    changed = tmp / "explicit_changed.yaml"
    changed.write_text(stale + f"corpus: {{path: '{good}', passage_words: 20}}\n")

    def twenty_word_passages(result: subprocess.CompletedProcess) -> tuple[bool, str]:
        lengths = [len((d.get("content") or "").split()) for d in json.loads(result.stdout)]
        return bool(lengths) and all(n == 20 for n in lengths), f"passages of {sorted(set(lengths))} words returned"

    out.append(Case("search the same persist_path after passage_words 100 -> 20",
                    ["search", "--config", str(changed), "-q", "a1w5", "--method", "bm25", "--json"],
                    right=twenty_word_passages, says=("fingerprint", "icr2 index")))

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
    labels_out = tmp / "labels_out"

    def labels_read_right(_: subprocess.CompletedProcess) -> tuple[bool, str]:
        report = json.loads((labels_out / "tradeoff.json").read_text())
        questions = report["labels"]["questions"]
        skipped = report["labels"]["skips"].get("counts", {})
        never = report["all"]["methods"]["never"]["answer_match"]["mean"]  # the closed-book match of the file
        ok = questions == 2 and skipped == {"wrongly typed field": 1, "malformed JSON": 1} and never == 0.5
        return ok, f"{questions} labels read, skipped {skipped}, closed-book answer match {never:.3f} (true 0.500)"

    out.append(Case('labels with `closed_book_match: "false"` and a cut line, scored by eval-gate',
                    ["eval-gate", "--labels", str(labels), "--methods", "always,never", "--out-dir", str(labels_out)],
                    right=labels_read_right))

    contexts = tmp / "gate_context.jsonl"
    contexts.write_text("\n".join(json.dumps(r) for r in (
        {"question": "What is the capital of France?", "ground_truth": ["Paris"], "context": ["Paris is the capital."]},
        {"question": "How many legs has a spider?", "ground_truth": ["8"], "context": [8, None]},
    )) + "\n")
    out.append(Case("eval-gate record whose context holds non-strings",
                    ["eval-gate", str(contexts), "--method", "always", "--max-new-tokens", "8", "--decisions-only"],
                    right=output_says("skipped 1 (1 wrongly typed field)")))

    empty_model = tmp / "not-a-model"
    empty_model.mkdir()
    broken = tmp / "broken_reader.yaml"
    broken.write_text(
        (REPO / "pipelines" / "closed_book.yaml")
        .read_text()
        .replace("model: smollm2-135m-instruct", f"model: '{empty_model}'")
    )
    cmp3 = tmp / "cmp3"
    out.append(Case("`icr2 compare` with a reader that cannot load",
                    ["compare", "--pipelines", str(broken), "--limit", "2", "--context-types", "open", "--out",
                     str(cmp3)],
                    says=("broken_reader", "cannot load"),
                    # a report written anyway (n = 0) was the silent wrong result
                    after=lambda _: (not (cmp3 / "report.json").exists(),
                                     "report.json written" if (cmp3 / "report.json").exists() else "no report")))

    other = tmp / "other.jsonl"
    other.write_bytes(b"\n".join(article(f"o{i}", f"Other {i}", words(f"o{i}w", 120)) for i in range(3)) + b"\n")
    second = tmp / "second_corpus.yaml"
    second.write_text(built.read_text().replace(str(good), str(other)).replace("name: built", "name: second")
                      .replace("built.ckpt.json", "second.ckpt.json"))
    out.append(Case("a second corpus into the built Elasticsearch index", index_argv(second),
                    says=("fingerprint",), not_says=("unexpected",),
                    # the index must still hold the first corpus only, whatever the command said
                    after=holds(lambda: es_contents(built), 12, ("a0w5",), ("o0w5",))))
    out.append(Case("hybrid search on an Elasticsearch index never built",
                    ["search", "--config", str(never), "-q", "nobel prize", "--method", "hybrid"],
                    says=(es_index_of(never), "icr2 index"), not_says=("without embeddings",)))

    # the shipped knn gate's artifact beside a .npz of random bytes, read by eval-gate's learned method
    artifact = tmp / "adaptive_rag.learned.json"
    artifact.write_text((REPO / "icr2_components" / "resources" / "artifacts" / artifact.name).read_text())
    (tmp / json.loads(artifact.read_text())["vectors_file"]).write_bytes(os.urandom(4096))
    good_labels = tmp / "good_labels.jsonl"
    good_labels.write_text(labels.read_text().splitlines()[0] + "\n" + labels.read_text().splitlines()[1] + "\n")
    out.append(Case("a knn gate's `.npz` of random bytes (eval-gate learned=)",
                    ["eval-gate", "--labels", str(good_labels), "--methods", f"always,learned={artifact}"],
                    says=(".npz", "Train the gate again"), not_says=("allow_pickle",)))

    tpu = tmp / "tpu.yaml"
    tpu.write_text((REPO / "training" / "smollm2_cpu_rta.yaml").read_text().replace("device: cpu", "device: tpu", 1))
    out.append(Case("training recipe with `device: tpu`", ["train", "--config", str(tpu)],
                    says=("tpu", "cpu, cuda, cuda:N or mps")))
    out += loading_cases(tmp)
    out += artifact_cases(tmp, good_labels)
    out += answer_cache_cases(tmp)
    out += served_backend_cases(tmp)
    return out



# -- a fresh cache, bad records, paths that cannot be read or written ------------------------------------------


def loading_cases(tmp: Path) -> list[Case]:
    out: list[Case] = []
    index = f"icr2-bad-shipped-{uuid.uuid4().hex[:6]}"
    cache = tmp / "fresh-cache"  # does not exist: a machine that never ran icr2
    report = tmp / "shipped.report.json"

    def shipped_loaded(_: subprocess.CompletedProcess) -> tuple[bool, str]:
        values = json.loads(report.read_text())
        count, text = es_contents_of_index(index)
        embedded = text.count('"embedding": [')
        checkpoint = cache / "checkpoints" / f"{index}.json"
        done = checkpoint.is_file() and json.loads(checkpoint.read_text()).get("completed") is True
        n = values["passages_streamed"]
        ok = n > 0 and values["documents_in_store"] == count == embedded == n and done
        return ok, (f"{n} passages streamed, the node holds {count} ({embedded} with vectors); checkpoint in the "
                    f"fresh cache {'completed' if done else 'missing or incomplete'}")

    out.append(Case("the shipped `indexing/kilt-sample-elasticsearch.yaml` on a fresh, empty cache (40 articles)",
                    ["index", "--config", "indexing/kilt-sample-elasticsearch.yaml", "--set", f"store.index={index}",
                     "--set", "corpus.max_articles=40", "--no-progress", "--report", str(report)],
                    env={"ICR2_CACHE_DIR": str(cache)}, right=shipped_loaded))

    lines = corpus_bytes()
    lines[2] = json.dumps({"wikipedia_id": "2", "wikipedia_title": "Lone", "text": ["Lone", "a \ud800 b"]}).encode()
    surrogate = tmp / "surrogate.jsonl"
    surrogate.write_bytes(b"\n".join(lines) + b"\n")
    out.append(Case('a record holding a lone surrogate (`"\\ud800"`) in line 3', index_argv(index_config(
        tmp, "surrogate", str(surrogate))), right=both(output_says("lone surrogate", "line 3"), holds(
            lambda: in_memory_contents(tmp / "surrogate.json"), 10, ("a3w5",), ("a2w5",)))))

    folder = tmp / "a_folder"
    folder.mkdir()
    out.append(Case("`corpus.path` that is a directory", index_argv(index_config(tmp, "corpusdir", str(folder))),
                    says=("a_folder", "directory"), after=no_file(tmp / "corpusdir.json*", "store file")))
    out.append(Case("`corpus.path` under a folder that does not exist",
                    index_argv(index_config(tmp, "corpusgone", str(tmp / "no_such_folder" / "c.jsonl"))),
                    says=("no_such_folder",)))
    good = tmp / "good.jsonl"
    store_dir = tmp / "store_dir"
    store_dir.mkdir()
    for label, persist, words_ in (("a directory", store_dir, ("store_dir", "directory")),
                                   ("under a file (a folder that cannot exist)", good / "index.json",
                                    ("good.jsonl", "is a file"))):
        config = tmp / f"persist-{len(out)}.yaml"
        config.write_text(f"name: persist\nstore: {{type: in_memory, persist_path: '{persist}'}}\n"
                          f"corpus: {{path: '{good}'}}\nembedding: {{enabled: false}}\n")
        out.append(Case(f"`persist_path` that is {label}", index_argv(config), says=words_,
                        after=no_file(tmp / "*.tmp", "temporary files")))

    a_file = tmp / "a_file.txt"
    a_file.write_text("not a folder\n")
    recipe = tmp / "output_is_file.yaml"
    recipe.write_text((REPO / "training" / "smollm2_cpu_rta.yaml").read_text().replace(
        "output_dir: runs/smollm2-cpu-rta", f"output_dir: '{a_file}'", 1))
    out.append(Case("training `output_dir` that is a file", ["train", "--config", str(recipe)],
                    says=("a_file.txt", "file"),
                    after=lambda _: (a_file.read_text() == "not a folder\n", "the file is unchanged")))
    return out


# -- artifacts and caches that must prove they are whole ---------------------------------------------------------


def artifact_cases(tmp: Path, labels: Path) -> list[Case]:
    """The shipped knn gate's JSON beside a tampered `.npz`, each read by eval-gate's learned method."""
    shipped = REPO / "icr2_components" / "resources" / "artifacts" / "adaptive_rag.learned.json"
    with np.load(shipped.with_suffix(".npz"), allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    vectors, flags = arrays["vectors"], arrays["labels"]
    variants = {
        "10 vector rows against 346 labels": {"vectors": vectors[:10]},
        "its labels flipped": {"labels": 1.0 - flags},
        "its vectors replaced by random ones": {
            "vectors": np.random.default_rng(0).standard_normal(vectors.shape).astype(vectors.dtype)},
        "its vectors cut to 100 dimensions": {"vectors": vectors[:, :100]},
    }
    out: list[Case] = []
    for number, (label, changed) in enumerate(variants.items()):
        folder = tmp / f"gate{number}"
        folder.mkdir()
        artifact = folder / shipped.name
        shutil.copy(shipped, artifact)
        np.savez(artifact.with_suffix(".npz"), **{**arrays, **changed})
        out.append(Case(f"a knn gate's `.npz` with {label} (eval-gate learned=)",
                        ["eval-gate", "--labels", str(labels), "--methods", f"always,learned={artifact}"],
                        says=("disagrees with", "Train the gate again"), not_says=("matmul",)))
    return out


def _compare_argv(out_dir: Path, backend: str | None = None, limit: int = 3) -> list[str]:
    return ["compare", "--pipelines", "closed_book", "--limit", str(limit), "--context-types", "open",
            "--backend", backend or llama_backend(), "--max-new-tokens", "8", "--out", str(out_dir), "--no-progress"]


def prepared(prepare, argv: list[str], env: dict | None = None):
    """A runner: ``prepare()`` (writes the bad file), then the CLI command."""

    def run() -> subprocess.CompletedProcess:
        prepare()
        return subprocess.run(ICR2 + argv, capture_output=True, text=True, cwd=REPO, timeout=900,
                              env={**os.environ, **(env or {})})

    return run


def answer_cache_cases(tmp: Path) -> list[Case]:
    """`icr2 compare`'s answer cache (answers.jsonl in --out), edited, duplicated and cut between two runs."""
    out_dir = tmp / "cmp_cache"
    cache = out_dir / "answers.jsonl"
    pristine = tmp / "answers.pristine.jsonl"
    argv = _compare_argv(out_dir)

    def keep_pristine(_: subprocess.CompletedProcess) -> tuple[bool, str]:
        # the run writes answers.jsonl.gz; the cases edit its lines as a plain cache (an older run's form, read and
        # appended to as it is), where a hand edit is a text edit
        written = out_dir / "answers.jsonl.gz"
        if written.exists():
            cache.write_bytes(gzip.decompress(written.read_bytes()))
            written.unlink()
        rows = cache.read_text(encoding="utf-8").splitlines()
        shutil.copy(cache, pristine)
        return len(rows) == 3, f"{len(rows)} answers cached"

    def restore(change) -> None:
        rows = pristine.read_text(encoding="utf-8").splitlines()
        text = change(rows)
        cache.write_text(text, encoding="utf-8")

    def edited(rows: list[str]) -> str:
        record = json.loads(rows[1])
        rows[1] = json.dumps({**record, "answer": (record.get("answers") or ["Paris"])[0]}, ensure_ascii=False)
        return "\n".join(rows) + "\n"

    def cut(rows: list[str]) -> str:
        return "\n".join([*rows[:-1], rows[-1][:len(rows[-1]) // 2]])

    def whole_again(_: subprocess.CompletedProcess) -> tuple[bool, str]:
        text = cache.read_text(encoding="utf-8")
        rows = text.splitlines()
        parsed = []
        for row in rows:
            try:
                parsed.append(json.loads(row))
            except ValueError:
                return False, f"a line that is not JSON is left: {row[:60]!r}"
        keys = {r["key"] for r in parsed}
        ok = text.endswith("\n") and len(keys) == 3 and len(rows) == 3
        return ok, f"{len(rows)} whole lines, {len(keys)} keys after the re-run"

    return [
        Case("(setup: `icr2 compare` closed_book over the llama.cpp server, 3 questions)", argv, setup=True,
             right=keep_pristine),
        Case("an answer in the cache edited by hand (a wrong answer made right), then the same compare",
             argv, runner=prepared(lambda: restore(edited), argv), says=("answers.jsonl", "line 2", "record_sha")),
        Case("a cache line copied to the end (the same key twice), then the same compare",
             argv, runner=prepared(lambda: restore(lambda rows: "\n".join([*rows, rows[0]]) + "\n"), argv),
             says=("answers.jsonl", "lines 1 and 4")),
        Case("the cache's last line cut in half (a killed run), then the same compare",
             argv, runner=prepared(lambda: restore(cut), argv), right=whole_again),
    ]


def served_backend_cases(tmp: Path) -> list[Case]:
    def backend_file(name: str, **served) -> Path:
        path = tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"kind": "served", "served_model": {
            "model": "smollm2-135m-instruct", "timeout_s": 5, "max_retries": 0, **served}}))
        return path

    def against(status: int, body: bytes, content_type: str, name: str, **served):
        def run() -> subprocess.CompletedProcess:
            with FixedAnswerServer(status, body, content_type) as server:
                backend = backend_file(name, api_base_url=server.url, **served)
                return subprocess.run(ICR2 + _compare_argv(tmp / f"cmp_{name}", str(backend), limit=2),
                                      capture_output=True, text=True, cwd=REPO, timeout=900)

        return run

    port = backend_file("port99999", api_base_url="http://127.0.0.1:99999/v1")
    return [
        Case("`port: 99999` in a backend file (icr2 compare --backend)",
             _compare_argv(tmp / "cmp_port", str(port), limit=2), says=("port must be from 1 to 65535", "99999")),
        Case("a compare whose every request fails (the server answers 503)", ["compare"],
             runner=against(503, b'{"error": {"message": "the model is loading"}}', "application/json", "down",
                            context_length=2048, tokenizer="smollm2-135m-instruct"),
             says=("every one of the 2 answers requested failed", "503")),
        Case("a backend server answering an HTML page (its tokenize endpoints included)", ["compare"],
             runner=against(200, b"<html><body>Welcome to nginx!</body></html>", "text/html", "garbage",
                            context_length=2048),
             says=("not a token list", "api_base_url")),
    ]
