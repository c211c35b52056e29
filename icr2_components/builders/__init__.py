"""Corpus-in-context building: the confounder-aware builder, ICR2 prompt templates, benchmark construction."""

from icr2_components.builders.benchmark import (
    GoldPassageLookup,
    ICR2Instance,
    benchmark_statistics,
    build_icr2_benchmark,
    read_icr2_benchmark,
)
from icr2_components.builders.corpus_assembly import (
    BudgetTooSmallError,
    CorpusAssembler,
    CorpusReport,
    CorpusResult,
    pool_round_robin,
)
from icr2_components.builders.corpus_builder import ConfounderAwareCorpusBuilder
from icr2_components.builders.prompt_builder import CorpusInContextPromptBuilder
from icr2_components.builders.templates import (
    TASK_TEMPLATES,
    TASK_TYPES,
    RenderedPrompt,
    format_passage,
    format_passage_id,
    render_cic_prompt,
)
from icr2_components.builders.text_checks import contains_answer, normalize_text
from icr2_components.builders.token_counting import PassageTokenCounter

__all__ = [
    "BudgetTooSmallError",
    "GoldPassageLookup",
    "ICR2Instance",
    "benchmark_statistics",
    "build_icr2_benchmark",
    "read_icr2_benchmark",
    "ConfounderAwareCorpusBuilder",
    "CorpusAssembler",
    "CorpusInContextPromptBuilder",
    "CorpusReport",
    "CorpusResult",
    "PassageTokenCounter",
    "RenderedPrompt",
    "TASK_TEMPLATES",
    "TASK_TYPES",
    "contains_answer",
    "format_passage",
    "format_passage_id",
    "normalize_text",
    "pool_round_robin",
    "render_cic_prompt",
]
