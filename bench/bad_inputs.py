"""Bad inputs through the real `icr2` command: what each gets, and whether that is right.

Each case writes a real bad file (or points at a dead port, sends an over-long query, or a wrong type to the real
server) and runs the installed CLI in a subprocess, as a user would. Each outcome is classified from what the run
shows, never from the case's name:

- ``clear error``: exit non-zero, no traceback, exactly one ``icr2 <command>: error:`` line, which says what the
  case needs it to say (and not what would mislead, e.g. ``allow_pickle`` for a file that is not a .npz);
- ``right result``: exit 0 and the case's check of the result holds (a counted skip, the store holding what it
  should, the passages of the config asked for);
- ``traceback``: a Python traceback on stderr (or an HTTP 5xx from the server);
- ``silent wrong result``: exit 0 where the check fails or an error was due, or a store left holding what it
  should not (even after an error);
- ``unclear error``: exit non-zero without a traceback, but not one line saying what the case needs.

Setup steps (marked ``(setup: ...)``) are checked too but not counted among the bad inputs. The table goes to
stdout and to ``bench/results/bad_inputs.md``, the records to ``bench/results/bad_inputs.json``. The
Elasticsearch cases need the project's node (``bash scripts/elasticsearch.sh start``; ``ICR2_ES_URL`` to point
elsewhere). Exits 1 when any input gets a traceback, a silent wrong result or an unclear error.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bad_inputs.py
"""

from __future__ import annotations

import os

from icr2_components._environment import DEFAULTS

# the project's entry-point defaults (telemetry off, the hub offline), set before Haystack is imported
os.environ.update({key: os.environ.get(key, value) for key, value in DEFAULTS.items()})

import gzip
import json
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import yaml  # noqa: E402
from tqdm import tqdm  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ICR2 = [sys.executable, "-m", "icr2_components.cli"]
ES_URL = os.environ.get("ICR2_ES_URL", "http://127.0.0.1:9200")
CLASSES = ("clear error", "right result", "traceback", "silent wrong result", "unclear error")
ERROR_LINE = re.compile(r"^icr2 [\w-]+: error: ")

# a check of an exit-0 run (or of the store after any run): (holds, what was observed)
Check = Callable[[subprocess.CompletedProcess], tuple[bool, str]]


@dataclass
class Case:
    what: str
    argv: list[str]
    # exit 0: what makes the result right (None: an error was due, exit 0 is a silent wrong result)
    right: Check | None = None
    # any exit: what must hold of the store afterwards (an error that leaves wrong data is still a wrong result)
    after: Check | None = None
    # a clear error's line must contain each of these and none of the misleading ones
    says: tuple[str, ...] = ()
    not_says: tuple[str, ...] = ()
    setup: bool = False
    # run instead of the CLI command (the server case): returns (exit-like status, stdout, stderr)
    runner: Callable[[], subprocess.CompletedProcess] | None = None
    note: str = field(default="")


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


def index_argv(config: Path) -> list[str]:
    """`icr2 index` with its JSON report beside the config (the checks read it)."""
    return ["index", "--config", str(config), "--no-progress", "--report", str(config.with_suffix(".report.json"))]


def report_of(config: Path) -> dict:
    path = config.with_suffix(".report.json")
    return json.loads(path.read_text()) if path.is_file() else {}


# -- observations of the stores, made apart from the command that wrote them ----------------------------------


def es_index_of(config: Path) -> str:
    return yaml.safe_load(config.read_text())["store"]["index"]


def es_contents(config: Path) -> tuple[int, str]:
    """(documents, their text joined) of the config's Elasticsearch index, read straight from the node."""
    index = es_index_of(config)
    try:
        urllib.request.urlopen(urllib.request.Request(f"{ES_URL}/{index}/_refresh", method="POST"), timeout=30).read()
        with urllib.request.urlopen(f"{ES_URL}/{index}/_search?size=1000", timeout=30) as response:
            hits = json.loads(response.read())["hits"]["hits"]
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return 0, ""
        raise
    return len(hits), "\n".join(json.dumps(hit["_source"]) for hit in hits)


def in_memory_contents(store: Path) -> tuple[int, str]:
    """(documents, their text) of an in-memory store file, read as JSON (not through the package)."""
    if not store.is_file():
        return 0, ""
    documents = json.loads(store.read_text()).get("documents", [])
    return len(documents), "\n".join(str(d.get("content", "")) for d in documents)


def holds(read: Callable[[], tuple[int, str]], n: int, present: tuple[str, ...] = (),
          absent: tuple[str, ...] = ()) -> Check:
    """The store holds ``n`` documents, with each of ``present`` and none of ``absent`` in their text."""

    def check(_: subprocess.CompletedProcess) -> tuple[bool, str]:
        count, text = read()
        missing = [w for w in present if w not in text]
        found = [w for w in absent if w in text]
        ok = count == n and not missing and not found
        return ok, f"store holds {count} (expected {n})" + (f"; missing {missing}" if missing else "") + (
            f"; holds {found}" if found else "")

    return check


def output_says(*parts: str) -> Check:
    def check(result: subprocess.CompletedProcess) -> tuple[bool, str]:
        text = result.stdout + result.stderr
        missing = [p for p in parts if p not in text]
        return not missing, "output says " + ", ".join(repr(p) for p in parts) if not missing else (
            f"output lacks {missing}")

    return check


def both(first: Check, second: Check) -> Check:
    def check(result: subprocess.CompletedProcess) -> tuple[bool, str]:
        ok1, seen1 = first(result)
        ok2, seen2 = second(result)
        return ok1 and ok2, f"{seen1}; {seen2}"

    return check


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
        "duplicate", corpus_bytes()[:3] + [article("1", "Article 1 again", words("zzz", 300))] + corpus_bytes()[3:]
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
    bom = corpus("bom", [b"\xef\xbb\xbf" + corpus_bytes()[0]] + corpus_bytes()[1:])
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
    artifact.write_text((REPO / "pipelines" / "adaptive_rag.learned.json").read_text())
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
    out.append(Case('`"stream": "yes"` to `icr2 serve` (OpenAI chat completions)', ["serve"],
                    says=("stream", "boolean"), runner=serve_stream_yes))
    return out


def serve_stream_yes() -> subprocess.CompletedProcess:
    """`icr2 serve pipelines/closed_book.yaml` on a free loopback port; one chat completion with "stream": "yes".

    The status is the HTTP one (0 for a 2xx, as a command's exit); the reply's error message stands in for the error
    line; stderr holds the server's own stderr (a traceback there counts)."""
    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    argv = ICR2 + ["serve", "pipelines/closed_book.yaml", "--port", str(port), "--max-new-tokens", "4"]
    server = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while True:
            if server.poll() is not None:
                return subprocess.CompletedProcess(argv, server.returncode, "", server.stderr.read())
            try:
                if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                return subprocess.CompletedProcess(argv, 124, "", "icr2 serve: error: not ready in 300 s")
            time.sleep(0.5)
        response = httpx.post(f"{url}/v1/chat/completions", timeout=300, json={
            "model": "closed_book", "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "stream": "yes"})
    finally:
        server.terminate()
        try:
            _, server_err = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            _, server_err = server.communicate()
    if response.is_success:
        return subprocess.CompletedProcess(argv, 0, response.text, server_err)
    try:
        error = response.json()["error"]
        line = f"icr2 serve: error: HTTP {response.status_code} {error.get('code')} (param {error.get('param')!r}): "
        line += str(error.get("message"))
    except (ValueError, KeyError, TypeError, AttributeError):
        line = f"icr2 serve: error: HTTP {response.status_code} {response.text[:300]}"
    # a 5xx is the server's traceback as far as the client sees
    traceback = "\nTraceback (HTTP 5xx)" if response.status_code >= 500 else ""
    return subprocess.CompletedProcess(argv, response.status_code, "", line + "\n" + server_err + traceback)


# -- running and classifying ---------------------------------------------------------------------------------


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


def classify(case: Case, result: subprocess.CompletedProcess) -> tuple[str, str]:
    """(class, what was observed that decided it)."""
    seen = []
    if case.after is not None:
        ok, observed = case.after(result)
        seen.append(observed)
        if not ok:
            return "silent wrong result", "; ".join(seen)
    if "Traceback" in result.stderr:
        return "traceback", "; ".join(seen)
    if result.returncode == 0:
        if case.right is None:
            return "silent wrong result", "; ".join(seen + ["exit 0 where an error was due"])
        try:
            ok, observed = case.right(result)
        except (OSError, ValueError, KeyError, TypeError) as error:
            ok, observed = False, f"result unreadable ({type(error).__name__}: {error})"
        seen.append(observed)
        return ("right result" if ok else "silent wrong result"), "; ".join(seen)
    lines = [line for line in result.stderr.splitlines() if ERROR_LINE.match(line)]
    if len(lines) != 1:
        return "unclear error", "; ".join(seen + [f"{len(lines)} error lines"])
    missing = [w for w in case.says if w.lower() not in lines[0].lower()]
    misleading = [w for w in case.not_says if w.lower() in lines[0].lower()]
    if missing or misleading:
        return "unclear error", "; ".join(seen + [f"line lacks {missing}" if missing else "",
                                                   f"line says {misleading}" if misleading else ""]).strip("; ")
    return "clear error", "; ".join(seen)


def _delete_bench_indexes() -> None:
    """Delete the icr2-bad-* indexes this run made (by name: Elasticsearch 8 refuses wildcard deletes)."""
    try:
        with urllib.request.urlopen(f"{ES_URL}/_cat/indices/icr2-bad-*?format=json", timeout=30) as response:
            names = [row["index"] for row in json.loads(response.read())]
        for name in names:
            urllib.request.urlopen(urllib.request.Request(f"{ES_URL}/{name}", method="DELETE"), timeout=30).read()
    except OSError as error:
        print(f"(could not delete the icr2-bad-* indexes: {error})")


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=None, help="run only the cases whose input contains one of these "
                        "comma-separated texts (and the setup steps); the results files are then not written")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="icr2-bad-") as folder:
        tmp = Path(folder)
        tried = [c for c in cases(tmp) if args.only is None or c.setup
             or any(o.strip().lower() in c.what.lower() for o in args.only.split(","))]
        for case in tqdm(tried, desc="bad inputs", unit=" case"):
            start = time.perf_counter()
            if case.runner is not None:
                result = case.runner()
            else:
                result = subprocess.run(ICR2 + case.argv, capture_output=True, text=True, cwd=REPO, timeout=600)
            seconds = round(time.perf_counter() - start, 1)
            kind, observed = classify(case, result)
            results.append(
                {
                    "input": case.what,
                    "setup": case.setup,
                    "exit": result.returncode,
                    "class": kind,
                    "observed": observed,
                    "traceback": "Traceback" in result.stderr,
                    "stderr_lines": len([line for line in result.stderr.splitlines() if ERROR_LINE.match(line)]),
                    "outcome": outcome(result),
                    "seconds": seconds,
                }
            )
        _delete_bench_indexes()
        for r in results:
            r["outcome"] = r["outcome"].replace(folder, "<tmp>")
            r["observed"] = r["observed"].replace(folder, "<tmp>")
    lines = ["| bad input | exit | class | what the user gets | observed | s |", "|---|---|---|---|---|---|"]
    for r in results:
        shown = r["outcome"].replace("|", "\\|")
        observed = r["observed"].replace("|", "\\|")
        lines.append(f"| {r['input']} | {r['exit']} | {r['class']} | {shown} | {observed} | {r['seconds']:.0f} |")
    counted = [r for r in results if not r["setup"]]
    totals = Counter(r["class"] for r in counted)
    summary = f"{len(counted)} bad inputs (+ {len(results) - len(counted)} setup steps): " + ", ".join(
        f"{totals.get(c, 0)} {c}" for c in CLASSES)
    table = "\n".join(lines) + "\n\n" + summary
    print(table)
    if args.only is not None:
        return 0
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bad_inputs.json").write_text(json.dumps({"totals": {c: totals.get(c, 0) for c in CLASSES},
                                                     "cases": results}, indent=2))
    (out / "bad_inputs.md").write_text(table + "\n")
    bad = [r["input"] for r in results if r["class"] not in ("clear error", "right result")]
    if bad:
        print(f"not a clear error nor a right result: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
