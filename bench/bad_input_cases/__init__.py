"""The cases of ``bench/bad_inputs.py``, by surface: the ``icr2`` command (``cli_cases``), the ``icr2 serve`` server
over HTTP (``http_cases``) and the library's components called in one process (``component_cases``); ``common``
holds what they share (a case, its classes and the checks of a result)."""
