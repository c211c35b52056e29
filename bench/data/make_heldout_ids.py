"""Write bench/data/heldout_nq_ids.txt: the NQ-sample questions the held-out evaluations run on.

Every probe, tuning run and earlier bench of this project drew its NQ-sample questions from the front of the file
(PH3 and RAP heads: the first 16-40; the CUB matrix: questions 16-36; the position sweep and the quickstart: the
first 12-40; prompt checks: questions 600-620). The held-out pool is therefore a seeded shuffle of the questions
at positions 1000 and later; each evaluation takes its first N (the position sweep the first N that have a single
answer-bearing gold passage). `icr2 compare --question-ids` refuses the file if it lists any question a
pipeline's probe artifact was probed on (``probed_ids``), so a future probe on these questions cannot leak into a
report.

    .venv/bin/python bench/data/make_heldout_ids.py     # rewrites the file (same seed -> same file)
"""

from __future__ import annotations

import json
import random
from pathlib import Path

FIRST_POSITION = 1000
COUNT = 600
SEED = 15
PREFIXES = {"heldout_nq_ids_first200.txt": 200, "heldout_nq_ids_first100.txt": 100}
# Slices after the first 200, for the gates' confirmatory held-apart set (bench/data/gate_confirm_preregistration.md):
# two halves so that two labelling processes can share the cores. 1-based positions in the names, end included.
SLICES = {"heldout_nq_ids_201-400.txt": (200, 400), "heldout_nq_ids_401-600.txt": (400, 600)}


def main() -> None:
    from icr2_components.kilt import build_sample

    tasks = build_sample().tasks
    ids = [json.loads(line)["id"] for line in Path(tasks).read_text().splitlines() if line.strip()]
    pool = ids[FIRST_POSITION:]
    chosen = random.Random(SEED).sample(pool, min(COUNT, len(pool)))
    out = Path(__file__).with_name("heldout_nq_ids.txt")
    header = [f"# {len(chosen)} NQ-sample question ids held out from every probe, tuning run and earlier bench:",
              f"# a random.Random({SEED}) sample of the {len(pool)} questions at positions >= {FIRST_POSITION} of",
              "# nq-sample-kilt.jsonl (icr2_components.kilt.build_sample). Written by bench/data/make_heldout_ids.py."]
    out.write_text("\n".join(header + chosen) + "\n")
    print(f"wrote {out} ({len(chosen)} ids)")
    # `icr2 compare --question-ids` runs exactly a file's ids: one file per evaluation, each a prefix of the pool
    for name, count in PREFIXES.items():
        prefix = out.with_name(name)
        prefix.write_text("\n".join([f"# the first {count} ids of heldout_nq_ids.txt (bench/data/make_heldout_ids.py)",
                                     *chosen[:count]]) + "\n")
        print(f"wrote {prefix} ({count} ids)")
    for name, (start, end) in SLICES.items():
        part = out.with_name(name)
        part.write_text("\n".join([f"# ids {start + 1}-{end} of heldout_nq_ids.txt (bench/data/make_heldout_ids.py)",
                                   *chosen[start:end]]) + "\n")
        print(f"wrote {part} ({end - start} ids)")


if __name__ == "__main__":
    main()
