"""The files the package ships, found by name: technique pipelines, backend files, index configs, training configs,
the small artifacts the shipped pipelines read (the learned gate, the bundled reader's RAP and PH3 heads) and the
question sets of the shipped examples (``icr2 compare --dataset python-docs``).

They live inside the installed package, so a name works from any folder, with or without this repository:

    >>> from icr2_components.resources import shipped_file, shipped_names
    >>> shipped_names("pipelines")[:3]
    ['adaptive_rag', 'cic_benchmark_gold_position', 'cic_benchmark_relevance_order']
    >>> shipped_file("indexing", "kilt-sample").name
    'kilt-sample.yaml'
    >>> shipped_file("artifacts", "rap_heads_smollm2").name
    'rap_heads_smollm2.json'

Wherever the library takes one of these files (``load_pipeline``, ``index:`` and ``artifact:`` in a YAML, ``--backend``,
``icr2 serve``) it takes a path or a shipped name: :func:`resolve_file` returns a path that exists as it is, else the
shipped file of that name, and refuses a name that is neither, listing the shipped names.
"""

from icr2_components.resources.lookup import shipped_file, shipped_names

__all__ = ["shipped_file", "shipped_names"]
