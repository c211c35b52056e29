"""Reports: the compare report with its uncertainty (``compare_report``), position curves, and rendering as
CLI tables, Markdown, HTML and PNGs (``rendering``)."""
