"""Answer metrics: answer match, exact match / F1 / ROUGE-L, the short-answer span, BCU, Haystack's and ragas'
scores."""
