"""The statistics every evaluation shares: Wilson and BCa intervals, paired tests with Holm, AUROC with DeLong,
proportions, and the position-curve shape tests. Pure functions over arrays; nothing here reads a file."""
