"""Gate evaluation: need-for-retrieval labels, RetrievalQA-format runs, every gate method over labelled
questions, the trade-off curve and its objective, and fitting a gate (``icr2 train-gate``) on that curve."""
