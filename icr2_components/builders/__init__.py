"""Builders: the confounder-aware corpus-in-context builder, the prompt builders, benchmark construction.

The reader of benchmark files (and the provenance -> gold passage lookup) is ground floor: ``kilt.icr2_benchmark``.

The CiC prompt template itself is ground floor (``icr2_components.text.templates``): the RAP filter, the
retrieval-head ranker and training render the very same prompt to find the passages in it.
"""

from icr2_components.builders.context_use_prompt_builder import ContextUsePromptBuilder
from icr2_components.builders.corpus_assembly import BudgetTooSmallError, CorpusAssembler
from icr2_components.builders.corpus_builder import ConfounderAwareCorpusBuilder
from icr2_components.builders.key_value_prompt_builder import KeyValueRetrievalPromptBuilder
from icr2_components.builders.multi_agent_answer_prompt_builder import MultiAgentAnswerPromptBuilder
from icr2_components.builders.prompt_builder import CorpusInContextPromptBuilder
from icr2_components.builders.relevance_judge_prompt_builder import RelevanceJudgePromptBuilder

__all__ = [
    "BudgetTooSmallError",
    "ConfounderAwareCorpusBuilder",
    "ContextUsePromptBuilder",
    "CorpusAssembler",
    "CorpusInContextPromptBuilder",
    "KeyValueRetrievalPromptBuilder",
    "MultiAgentAnswerPromptBuilder",
    "RelevanceJudgePromptBuilder",
]
