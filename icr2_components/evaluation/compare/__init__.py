"""``icr2 compare``: the run (``run``), its answer cache, dev/test splits, held-out discipline and tuning.

Questions and CUB context sets are ground floor (``kilt.questions``, ``kilt.context_types``): probing reads
them too. The report built from a run is in ``evaluation.reports``.
"""
