"""Bad inputs to the ``icr2`` command that reach the operating system or change what a run answers: outputs
that exist as files or live under ``/proc``, FIFOs where a file belongs (each run under a short time limit: a
FIFO blocks a reader forever), a binary ``--question-ids`` file, a port in use, a folder file whose name is not
UTF-8 (into Elasticsearch), a CUDA device on a machine without one, numbers that are NaN or infinite on the
command line, a served model the server does not serve, an unset key variable; a question set edited between
two runs into the same ``--out`` (the cached answers must follow the question, the scores the gold); a corpus
table read leniently; and a run whose skips must all be named."""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import yaml

from bad_input_cases.common import (
    ES_URL,
    ICR2,
    LLAMA_URL,
    REPO,
    Case,
    es_contents_of_index,
    llama_backend,
    output_says,
    timed_out,
)

FIFO_LIMIT_S = 60


def _index_config(tmp: Path, name: str, corpus: dict[str, Any], store: dict[str, Any] | None = None) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "store": store or {"type": "in_memory", "persist_path": str(tmp / f"{name}.json")},
        "corpus": {"count_tokens_for": [], **corpus}, "embedding": {"enabled": False},
        "writer": {"checkpoint_path": str(tmp / f"{name}.ckpt.json")}}))
    return path


def _index(config: Path, *extra: str) -> list[str]:
    return ["index", "--config", str(config), "--no-progress", *extra]


def _gate_file(tmp: Path) -> Path:
    path = tmp / "gate_questions.jsonl"
    path.write_text(json.dumps({"question": "What is the capital of France?", "ground_truth": ["Paris"],
                                "needs_retrieval": False}) + "\n")
    return path


def _compare(out: Path, *extra: str, dataset: Path | None = None, limit: int = 2) -> list[str]:
    argv = ["compare", "--pipelines", "closed_book", "--limit", str(limit), "--context-types", "open",
            "--backend", llama_backend(), "--max-new-tokens", "8", "--out", str(out), "--no-progress", *extra]
    return argv + (["--dataset", str(dataset)] if dataset is not None else [])


def _run(argv: list[str], timeout_s: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(ICR2 + argv, capture_output=True, text=True, cwd=REPO, timeout=timeout_s,
                              env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired as error:
        return timed_out(argv, error)


def path_cases(tmp: Path) -> list[Case]:
    """Outputs and inputs the operating system decides about, checked before work starts."""
    out: list[Case] = []
    a_file = tmp / "a_file.txt"
    a_file.write_text("keep me\n")

    def unchanged(_: Any) -> tuple[bool, str]:
        return a_file.read_text() == "keep me\n", "the file is unchanged"

    out.append(Case("`icr2 compare --out` that is a file", _compare(a_file), says=("a_file.txt",), after=unchanged))
    out.append(Case("`icr2 compare --out` under a file", _compare(a_file / "run"), says=("a_file.txt",),
                    after=unchanged))
    out.append(Case("`icr2 compare --out /proc/icr2-run` (a virtual file system)", _compare(Path("/proc/icr2-run")),
                    says=("/proc",)))
    good = tmp / "good.jsonl"
    good.write_text("\n".join(json.dumps({"wikipedia_id": str(i), "wikipedia_title": f"A{i}",
                                          "text": [f"A{i}", f"Article {i} holds words."]}) for i in range(4)) + "\n")
    config = _index_config(tmp, "paths_good", {"path": str(good)})
    out.append(Case("`icr2 index --report /proc/icr2.json`", _index(config, "--report", "/proc/icr2.json"),
                    says=("/proc",)))
    out.append(Case("`icr2 index --report` that is a folder", _index(config, "--report", str(tmp)),
                    says=(tmp.name,)))
    out.append(Case("`corpus.path: /proc/self/status` (a virtual file)",
                    _index(_index_config(tmp, "proc_corpus", {"path": "/proc/self/status"})), says=("/proc",)))
    out.append(Case("`persist_path` under /proc", _index(_index_config(
        tmp, "proc_store", {"path": str(good)}, {"type": "in_memory", "persist_path": "/proc/icr2/index.json"})),
        says=("/proc",)))
    binary = tmp / "ids.bin"
    binary.write_bytes(os.urandom(2048))
    out.append(Case("a binary `--question-ids` file", _compare(tmp / "cmp_ids_bin", "--question-ids", str(binary)),
                    says=("ids.bin",)))
    out.append(Case("`--question-ids` that is a folder", _compare(tmp / "cmp_ids_dir", "--question-ids", str(tmp)),
                    says=(tmp.name,)))
    for label, make in (("`--question-ids`", lambda f: _compare(tmp / "cmp_fifo", "--question-ids", str(f))),
                        ("`--dataset`", lambda f: _compare(tmp / "cmp_fifo_ds", dataset=f)),
                        ("a KILT `corpus.path`", lambda f: _index(_index_config(tmp, f"fifo_{f.stem}",
                                                                                {"path": str(f)}))),
                        ("a CSV `corpus.path`", lambda f: _index(_index_config(tmp, f"fifo_{f.stem}",
                                                                               {"format": "csv", "path": str(f)}))),
                        ("`icr2 eval-gate` data", lambda f: ["eval-gate", str(f), "--method", "always",
                                                            "--decisions-only"])):
        fifo = tmp / f"fifo_{len(out)}{'.csv' if 'CSV' in label else '.jsonl'}"
        os.mkfifo(fifo)
        out.append(Case(f"{label} that is a FIFO (nothing ever written)", make(fifo), says=(fifo.name,),
                        timeout_s=FIFO_LIMIT_S))
    return out


def _port_in_use() -> Case:
    def run() -> subprocess.CompletedProcess:
        with socket.socket() as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen(1)
            port = holder.getsockname()[1]
            result = _run(["serve", "closed_book", "--backend", llama_backend(), "--port", str(port)], 180)
        result.port = port  # type: ignore[attr-defined]
        return result

    def no_banner(result: subprocess.CompletedProcess) -> tuple[bool, str]:
        banner = [line for line in result.stdout.splitlines() if "serving" in line.lower()]
        return not banner, f"banner printed first: {banner[0][:80]!r}" if banner else "no serving banner"

    return Case("`icr2 serve --port` of a port in use", ["serve"], runner=run, says=("port", "in use"),
                after=no_banner)


def server_cases(tmp: Path) -> list[Case]:
    """What a served backend is told, and the CLI's numbers that are NaN or infinite."""
    out: list[Case] = [_port_in_use()]
    out.append(Case("`icr2 serve --port 70000`", ["serve", "closed_book", "--port", "70000"], says=("70000",)))
    out.append(Case("`icr2 serve --body-timeout nan`", ["serve", "closed_book", "--body-timeout", "nan"],
                    says=("body_timeout", "nan")))
    out.append(Case("`icr2 serve --request-timeout inf`", ["serve", "closed_book", "--request-timeout", "inf"],
                    says=("request_timeout", "inf")))
    out.append(Case("`icr2 compare --dev-fraction nan`", _compare(tmp / "cmp_nan", "--dev-fraction", "nan",
                                                                 "--split", "dev"), says=("dev fraction", "nan")))
    gate = _gate_file(tmp)
    out.append(Case("`icr2 eval-gate --threshold inf`", ["eval-gate", str(gate), "--method", "threshold",
                                                          "--threshold", "inf", "--decisions-only"],
                    says=("threshold",)))
    out.append(Case("`icr2 eval-gate --device cuda` on a machine without CUDA",
                    ["eval-gate", str(gate), "--method", "ta_are", "--device", "cuda", "--decisions-only"],
                    says=("cuda",)))
    recipe = tmp / "cuda_recipe.yaml"
    recipe.write_text((REPO / "training" / "smollm2_cpu_rta.yaml").read_text().replace("device: cpu",
                                                                                      "device: cuda", 1))
    out.append(Case("training recipe with `device: cuda` on a machine without CUDA", ["train", "--config",
                                                                                    str(recipe)],
                    says=("cuda",)))
    cuda_index = tmp / "cuda_index.yaml"
    cuda_index.write_text(yaml.safe_dump({"name": "cuda", "store": {"type": "in_memory"}, "corpus": {"path": "sample"},
                                          "embedding": {"enabled": True, "device": "cuda"}}))
    out.append(Case("index config with `embedding.device: cuda` on a machine without CUDA",
                    _index(cuda_index), says=("cuda",)))
    out.append(Case("`icr2 search` with a query of zero-width characters",
                    ["search", "--config", "kilt-sample", "-q", "\u200b\u200b\u200b", "--method", "bm25"],
                    says=("query",)))
    nan_index = _index_config(tmp, "nan_k1", {"path": "sample"})
    out.append(Case("`icr2 index --set store.bm25_k1=nan`", _index(nan_index, "--set", "store.bm25_k1=nan"),
                    says=("bm25_k1",)))

    def backend(name: str, **served) -> Path:
        path = tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"kind": "served", "served_model": {
            "api_base_url": LLAMA_URL, "timeout_s": 60, "max_retries": 0, **served}}))
        return path

    unserved = backend("unserved", model="gpt-4")
    out.append(Case("a backend naming a model the server does not serve (gpt-4)",
                    ["compare", "--pipelines", "closed_book", "--limit", "1", "--context-types", "open", "--backend",
                     str(unserved), "--out", str(tmp / "cmp_unserved"), "--no-progress"], says=("gpt-4",)))
    keyed = backend("unset_key", model="smollm2-135m-instruct", api_key_env="ICR2_BENCH_NO_SUCH_KEY")
    out.append(Case("a backend whose `api_key_env` names an unset variable (the local server needs no key)",
                    ["compare", "--pipelines", "closed_book", "--limit", "1", "--context-types", "open", "--backend",
                     str(keyed), "--max-new-tokens", "8", "--out", str(tmp / "cmp_unset_key"), "--no-progress"],
                    right=output_says("ICR2_BENCH_NO_SUCH_KEY"), says=("ICR2_BENCH_NO_SUCH_KEY",)))
    return out


def _answers(folder: Path) -> dict[str, str]:
    """``{question id: answer}`` of the answer cache in ``folder`` (JSON lines, plain or gzip), read directly."""
    for name in ("answers.jsonl.gz", "answers.jsonl"):
        path = folder / name
        if path.is_file():
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "rt", encoding="utf-8") as handle:
                return {r["question_id"]: r["answer"] for r in map(json.loads, filter(str.strip, handle))}
    return {}


def _report(folder: Path) -> dict:
    return json.loads((folder / "report.json").read_text())


def cache_cases(tmp: Path) -> list[Case]:
    """A question set edited between two `icr2 compare` runs into the same --out: a changed gold re-scores
    without asking; a changed question is asked again; another set whose ids overlap is asked, not reused."""
    folder = tmp / "cmp_edits"
    dataset = tmp / "three.jsonl"
    rows = [{"id": "a", "question": "What is the capital of France?", "answers": ["Paris"]},
            {"id": "b", "question": "Who wrote Hamlet?", "answers": ["Shakespeare"]},
            {"id": "c", "question": "What colour is the sky on a clear day?", "answers": ["blue"]}]

    def write(records: list[dict]) -> None:
        dataset.write_text("\n".join(json.dumps(r) for r in records) + "\n")

    write(rows)
    argv = _compare(folder, dataset=dataset, limit=3)

    def asked(n: int, note: str = ""):
        def check(_: Any) -> tuple[bool, str]:
            counters = _report(folder)["run"]["counters"]
            return counters["model_runs"] == n, f"{counters['model_runs']} model runs (expected {n}){note}"

        return check

    def gold_scored(_: Any) -> tuple[bool, str]:
        report = _report(folder)
        match = report["summary"]["closed_book"]["open"]["answer_match"]
        runs = report["run"]["counters"]["model_runs"]
        return runs == 0 and match == 1.0, (f"{runs} model runs, answer match {match} against the new gold (each "
                                            "gold set to the cached answer: 1.0 when the new gold is used)")

    def gold_is_the_cached_answers() -> None:
        cached = _answers(folder)
        write([{**r, "answers": [cached.get(r["id"], "none")]} for r in rows])

    def question_b_changed() -> None:
        edited = [dict(r) for r in rows]
        edited[1]["question"] = "Who painted the Mona Lisa?"
        edited[1]["answers"] = ["Leonardo"]
        write(edited)

    other = tmp / "other_set.jsonl"

    def prepared(prepare, args):
        def run() -> subprocess.CompletedProcess:
            prepare()
            return _run(args)

        return run

    def other_set() -> None:
        other.write_text("\n".join(json.dumps(r) for r in (
            {"id": "a", "question": "What is the largest planet?", "answers": ["Jupiter"]},
            {"id": "b", "question": "How many legs has a spider?", "answers": ["8"]})) + "\n")

    other_argv = _compare(folder, dataset=other, limit=2)
    return [
        Case("(setup: `icr2 compare` closed_book on a 3-question set over the llama.cpp server)", argv, setup=True,
             right=asked(3)),
        Case("the same set, every gold answer edited (same ids and questions), into the same --out", argv,
             runner=prepared(gold_is_the_cached_answers, argv), right=gold_scored),
        Case("the same set, question b's text edited (same id), into the same --out", argv,
             runner=prepared(question_b_changed, argv), right=asked(1, " (only the edited question)")),
        Case("another set whose ids a and b name other questions, into the same --out", other_argv,
             runner=prepared(other_set, other_argv), right=asked(2, " (both are other questions)")),
    ]


def _skip_file_named(result: subprocess.CompletedProcess, expected: list[str]) -> tuple[bool, str]:
    """The run's skip file (named on the console) names each of ``expected``."""
    import re

    match = re.search(r"named in (\S+)", result.stdout + result.stderr)
    if not match:
        return False, "the console names no skip file"
    path = Path(match.group(1).rstrip(".;,)"))
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    missing = [e for e in expected if not any(e in line for line in lines)]
    return not missing, f"{path.name}: {len(lines)} lines" + (f"; never names {missing}" if missing else "")


def table_and_skip_cases(tmp: Path) -> list[Case]:
    """A CSV with an open quote and a KILT file with 8 bad lines through `icr2 index`; a folder with a file name
    that is not UTF-8 into Elasticsearch."""
    out: list[Case] = []
    rows = [f"{i},Title {i},row{i} holds words of row {i}" for i in range(1, 21)]
    rows[3] = '4,Title 4,"row4 opens a quote it never closes'
    table = tmp / "open_quote.csv"
    table.write_text("\n".join(["id,title,text", *rows]) + "\n")
    config = _index_config(tmp, "open_quote", {"format": "csv", "path": str(table)})

    def no_row_swallowed(_: Any) -> tuple[bool, str]:
        import re

        store = tmp / "open_quote.json"
        documents = json.loads(store.read_text()).get("documents", []) if store.is_file() else []
        swallowed = [d["id"] for d in documents if len(re.findall(r"\brow\d+\b", d.get("content") or "")) > 1]
        return not swallowed, f"{len(documents)} passages in the store" + (
            f"; {swallowed[0]} holds several rows" if swallowed else "")

    out.append(Case("a CSV corpus with an unclosed quote in row 4 of 20 (icr2 index)", _index(config),
                    right=output_says("open_quote.csv"), says=("open_quote.csv",), kept=no_row_swallowed))
    lines = [json.dumps({"wikipedia_id": str(i), "wikipedia_title": f"A{i}", "text": [f"A{i}", f"row{i} words"]})
             for i in range(1, 21)]
    bad = [2, 4, 6, 8, 10, 12, 14, 16]
    for number in bad:
        lines[number - 1] = json.dumps({"wikipedia_id": str(number), "wikipedia_title": f"A{number}", "text": 7})
    kilt = tmp / "eight_bad.jsonl"
    kilt.write_text("\n".join(lines) + "\n")
    out.append(Case("a KILT file with 8 bad lines: the run's skip file names every one (icr2 index)",
                    _index(_index_config(tmp, "eight_bad", {"path": str(kilt)})),
                    right=lambda r: _skip_file_named(r, [f'"line": {n}' for n in bad]),
                    kept=lambda r: _skip_file_named(r, [f'"line": {n}' for n in bad])))
    folder = tmp / "latin1_names"
    folder.mkdir()
    for i in range(3):
        (folder / f"doc{i}.txt").write_text(f"Document {i} holds words of its own, number {i}.\n")
    with open(os.path.join(os.fsencode(folder), b"r\xe9sum\xe9.txt"), "wb") as handle:
        handle.write(b"A file whose name is Latin-1.\n")
    index = f"icr2-bad-names-{os.getpid()}"
    es = _index_config(tmp, "latin1_names", {"format": "folder", "path": str(folder)},
                       {"type": "elasticsearch", "hosts": ES_URL, "index": index, "max_retries": 0,
                        "request_timeout": 10})

    def three_indexed(_: Any) -> tuple[bool, str]:
        count, _text = es_contents_of_index(index)
        return count == 3, f"the node holds {count} (expected the 3 other files)"

    out.append(Case("a folder file whose name is not UTF-8, into Elasticsearch", _index(es),
                    right=output_says("not UTF-8"), says=("UTF-8",), kept=three_indexed))
    return out


def cases(tmp: Path) -> list[Case]:
    for name in ("paths", "servers", "cache", "tables"):
        (tmp / name).mkdir(exist_ok=True)
    return [*path_cases(tmp / "paths"), *server_cases(tmp / "servers"), *cache_cases(tmp / "cache"),
            *table_and_skip_cases(tmp / "tables")]
