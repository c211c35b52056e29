"""The bundled sample: real Wikipedia paragraphs written out in the KILT formats by our own code.

Sources (read from the shared data folder, never copied into the repository):

- ``nq-open-oracle.jsonl.gz``: NaturalQuestions-Open questions, each with its gold Wikipedia paragraph;
- ``dpr-wiki-sample-1000.jsonl``: 1,000 passages of the DPR 100-word Wikipedia split.

Paragraphs are grouped by article title into KILT knowledge-source articles (``text[0]`` is the title, as in
KILT), and each NQ question becomes a KILT task instance whose provenance points at its gold paragraph. The
same indexing path then serves this sample and the real 35 GB knowledge source.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from icr2_components.paths import cache_dir
from icr2_components.records.reading import open_text

NQ_FILE = "nq-open-oracle.jsonl.gz"
DPR_FILE = "dpr-wiki-sample-1000.jsonl"
SAMPLE_CORPUS_NAME = "kilt_knowledgesource.sample.jsonl"
SAMPLE_TASKS_NAME = "nq-sample-kilt.jsonl"
# The first id handed out; the real KILT ids are Wikipedia page ids, ours sit above any plausible collision
# being meaningful (they are only unique within the sample).
_FIRST_WIKIPEDIA_ID = 90_000_000


def shared_data_dir() -> Path:
    """Locate ``shared/data``: ``ICR2_DATA_DIR``, else ``../shared/data`` beside the working or repo root."""
    candidates = []
    if os.environ.get("ICR2_DATA_DIR"):
        candidates.append(Path(os.environ["ICR2_DATA_DIR"]))
    candidates.append(Path.cwd().parent / "shared" / "data")
    candidates.append(Path(__file__).resolve().parents[2].parent / "shared" / "data")
    for candidate in candidates:
        if (candidate / NQ_FILE).exists():
            return candidate
    raise FileNotFoundError(
        "The shared data folder was not found (looked in "
        + ", ".join(str(c) for c in candidates)
        + "). Set ICR2_DATA_DIR to the folder holding nq-open-oracle.jsonl.gz."
    )


@dataclass(frozen=True)
class SampleFiles:
    corpus: Path
    tasks: Path
    articles: int
    questions: int


def _normalise_title(title: str) -> str:
    title = title.strip()
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1]
    return title


def build_sample(
    output_dir: str | os.PathLike | None = None, data_dir: str | os.PathLike | None = None, force: bool = False
) -> SampleFiles:
    """Write the sample knowledge source and NQ task file (once; later calls reuse them unless ``force``)."""
    data = Path(data_dir) if data_dir else shared_data_dir()
    out = Path(output_dir) if output_dir else cache_dir() / "sample"
    out.mkdir(parents=True, exist_ok=True)
    corpus_path, tasks_path = out / SAMPLE_CORPUS_NAME, out / SAMPLE_TASKS_NAME
    stats_path = out / "sample_stats.json"
    if not force and corpus_path.exists() and tasks_path.exists() and stats_path.exists():
        stats = json.loads(stats_path.read_text())
        return SampleFiles(corpus_path, tasks_path, stats["articles"], stats["questions"])

    # title -> list of paragraphs (text[0] is the title, as in KILT)
    articles: dict[str, list[str]] = {}
    questions: list[tuple[str, list[str], str, str]] = []
    with open_text(data / NQ_FILE) as handle:
        for line in handle:
            record = json.loads(line)
            gold = record["ctxs"][0]
            title, text = _normalise_title(gold["title"]), " ".join(gold["text"].split())
            paragraphs = articles.setdefault(title, [title])
            if text not in paragraphs:
                paragraphs.append(text)
            questions.append((record["question"], record["answers"], title, text))
    with open_text(data / DPR_FILE) as handle:
        for line in handle:
            record = json.loads(line)
            title, _, text = record["contents"].partition("\n")
            title, text = _normalise_title(title), " ".join(text.split())
            paragraphs = articles.setdefault(title, [title])
            if text and text not in paragraphs:
                paragraphs.append(text)

    wikipedia_ids = {title: str(_FIRST_WIKIPEDIA_ID + i) for i, title in enumerate(articles)}
    tmp_corpus, tmp_tasks = corpus_path.with_suffix(".tmp"), tasks_path.with_suffix(".tmp")
    with open(tmp_corpus, "w", encoding="utf-8") as handle:
        for title, paragraphs in articles.items():
            wid = wikipedia_ids[title]
            handle.write(
                json.dumps(
                    {
                        "_id": wid,
                        "wikipedia_id": wid,
                        "wikipedia_title": title,
                        "text": paragraphs,
                        "anchors": [],
                        "categories": "",
                    }
                )
                + "\n"
            )
    with open(tmp_tasks, "w", encoding="utf-8") as handle:
        for index, (question, answers, title, text) in enumerate(questions):
            paragraph_id = articles[title].index(text)
            provenance = [
                {
                    "wikipedia_id": wikipedia_ids[title],
                    "title": title,
                    "start_paragraph_id": paragraph_id,
                    "start_character": 0,
                    "end_paragraph_id": paragraph_id,
                    "end_character": len(text),
                }
            ]
            output = [{"answer": answer} for answer in answers]
            output.append({"provenance": provenance})
            handle.write(json.dumps({"id": f"nq-sample-{index:05d}", "input": question, "output": output}) + "\n")
    os.replace(tmp_corpus, corpus_path)
    os.replace(tmp_tasks, tasks_path)
    stats_path.write_text(json.dumps({"articles": len(articles), "questions": len(questions)}))
    return SampleFiles(corpus_path, tasks_path, len(articles), len(questions))
