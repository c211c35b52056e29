"""Label the hand-written gate candidates with SmolLM2 closed-book answers and write the kept sets.

    .venv/bin/python bench/data/make_gate_sets.py            # the evaluation set and the default pools
    .venv/bin/python bench/data/make_gate_sets.py confirm    # the confirmatory held-apart set only

A needs-retrieval candidate is kept only if SmolLM2 does NOT match a gold answer closed-book (RetrievalQA
kept questions GPT-4 failed); an answerable candidate only if it DOES. Writes ``bench/data/gate_eval.jsonl``
(the evaluation set) and the package's default demonstration pools
(``icr2_components/resources/gates/{yes,no}_demonstrations.jsonl``) from disjoint candidate files. ``confirm``
writes ``bench/data/gate_confirm.jsonl`` (and ``gate_confirm_dropped.jsonl``) from ``gate_confirm_candidates.jsonl``
the same way: the questions of the gates' confirmatory test (``gate_confirm_preregistration.md``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from icr2_components.evaluation.gates.gate_eval import closed_book_messages  # noqa: E402
from icr2_components.evaluation.metrics.answer_match import answer_match  # noqa: E402
from icr2_components.readers import LocalChatReader  # noqa: E402

HERE = Path(__file__).resolve().parent
POOLS = ROOT / "icr2_components" / "resources" / "gates"


def label(path: Path, reader: LocalChatReader) -> tuple[list[dict], list[dict]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    kept, dropped = [], []
    for row in tqdm(rows, desc=path.name, unit="q"):
        reply = reader.run(messages=closed_book_messages(row["question"]))["replies"][0].text
        matched = answer_match(reply, row["ground_truth"])
        row["smollm2_closed_book_answer"] = reply
        # Keep a question only where the model's closed-book behaviour agrees with its label.
        (kept if matched != row["needs_retrieval"] else dropped).append(row)
    return kept, dropped


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def main() -> None:
    reader = LocalChatReader(model="smollm2-135m-instruct", max_new_tokens=24, dtype="float32", device="cpu")
    if sys.argv[1:] == ["confirm"]:
        kept, dropped = label(HERE / "gate_confirm_candidates.jsonl", reader)
        write_jsonl(HERE / "gate_confirm.jsonl", kept)
        write_jsonl(HERE / "gate_confirm_dropped.jsonl", dropped)
        counts: dict[str, list[int]] = {}
        for rows, index in ((kept, 0), (dropped, 1)):
            for row in rows:
                counts.setdefault(row["data_source"], [0, 0])[index] += 1
        print("confirmatory set, kept / dropped per source: "
              + ", ".join(f"{source} {k} / {d}" for source, (k, d) in sorted(counts.items())))
        return
    if sys.argv[1:]:
        raise SystemExit(f"usage: make_gate_sets.py [confirm]; got {sys.argv[1:]}")
    kept, dropped = label(HERE / "gate_eval_candidates.jsonl", reader)
    write_jsonl(HERE / "gate_eval.jsonl", kept)
    write_jsonl(HERE / "gate_eval_dropped.jsonl", dropped)
    print(f"evaluation set: kept {len(kept)}, dropped {len(dropped)} (model behaviour disagreed with the label)")
    kept, dropped = label(HERE / "gate_pool_candidates.jsonl", reader)
    yes = [
        {"question": r["question"], "answers": r["ground_truth"], "source": r["data_source"]}
        for r in kept
        if r["needs_retrieval"]
    ]
    no = [
        {"question": r["question"], "answers": r["ground_truth"], "source": r["data_source"]}
        for r in kept
        if not r["needs_retrieval"]
    ]
    write_jsonl(POOLS / "yes_demonstrations.jsonl", yes)
    write_jsonl(POOLS / "no_demonstrations.jsonl", no)
    print(f"pools: {len(yes)} [Yes], {len(no)} [No]; dropped {len(dropped)}")
    for row in dropped:
        print(f"  dropped pool candidate: {row['question']} -> {row['smollm2_closed_book_answer']!r}")


if __name__ == "__main__":
    main()
