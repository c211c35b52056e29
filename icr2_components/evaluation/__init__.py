"""Evaluation, split by role: ``metrics/`` (answer match, EM/F1/ROUGE-L, BCU), ``statistics/`` (intervals, paired
tests, AUROC, proportions), ``compare/`` (``icr2 compare``: runs, caches, splits, held-out, tuning), ``gates/``
(need labels, gate methods, trade-off curves, fitting a gate) and ``reports/`` (tables, Markdown, HTML, plots).
Import the modules directly (no eager imports here)."""
