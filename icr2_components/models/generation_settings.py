"""The ``generate`` arguments every component decoding with a local model uses, in one place.

Usage example:
```python
from icr2_components.models.generation_settings import decoding_arguments

output = model.generate(**encoded, max_new_tokens=16, pad_token_id=tokenizer.pad_token_id, **decoding_arguments())
```
"""

from __future__ import annotations

from typing import Any


def decoding_arguments(do_sample: bool = False, temperature: float = 1.0) -> dict[str, Any]:
    """Greedy decoding by default; sampling at ``temperature`` with ``do_sample``.

    Greedy decoding unsets ``temperature``, ``top_p`` and ``top_k``: a model's ``generation_config`` may set them
    (SmolLM2's does), and transformers warns on every call that they are ignored when they are left in.
    """
    if do_sample:
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {temperature}.")
        return {"do_sample": True, "temperature": temperature}
    return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
