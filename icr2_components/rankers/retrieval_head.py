"""The retrieval head of ICR2 section 4.3 (figure 9): scores each passage of a CiC prompt from the reader's
final hidden states.

Why here and not in ``training/``: the ranker needs the module at inference, and inference must not import
the training stack (Trainer, peft, accelerate); training imports it from here.

Architecture: the final hidden states over each passage's tokens and over the query's tokens are mean-pooled;
two single-layer encoders (linear + tanh) give ``h_q`` and ``h_c``; one linear scoring layer maps
``v_i = [h_q; h_c; h_q * h_c]`` to the score ``s_i``. The paper concatenates ``[h_q; h_c]`` only; with a single
linear layer that makes the ranking independent of the query (the ``h_q`` term adds the same constant to every
passage's score, and in a causal reader the passages come before the query so their states never see it), so
we add the element-wise product to the concatenation. The scoring layer stays a single layer.

Saved as a folder: ``config.json`` (format, sizes, K, the reader it was trained on and its prompt settings) and
``model.safetensors``.

Usage:
    >>> head = RetrievalHead(hidden_size=576, proj_dim=256)
    >>> scores = head(hidden_states, passage_spans=[(10, 50), (52, 90)], query_span=(95, 104))   # (2,)
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from icr2_components.extras import extra_import

with extra_import("local") as torch_import:
    import torch
    from torch import nn


HEAD_FORMAT = "icr2-retrieval-head/1"
HEAD_FOLDER = "retrieval_head"


@dataclass
class HeadConfig:
    hidden_size: int
    proj_dim: int = 256
    top_k: int = 2
    model: str = ""
    model_signature: dict[str, Any] = field(default_factory=dict)
    task_type: str = "qa"
    query_aware: bool = False
    format: str = HEAD_FORMAT


def mean_pool(hidden: torch.Tensor, spans: Sequence[tuple[int, int]]) -> torch.Tensor:
    """Mean of ``hidden`` (T, d) over each ``[start, end)`` span: (len(spans), d)."""
    if not spans:
        raise ValueError("mean_pool needs at least one span.")
    width = hidden.shape[0]
    pooled = []
    for start, end in spans:
        if not 0 <= start < end <= width:
            raise ValueError(f"Span ({start}, {end}) is empty or outside {width} positions.")
        pooled.append(hidden[start:end].mean(dim=0))
    return torch.stack(pooled)


# without torch (the core install) the class still exists, so that importing this module works; building it fails
# with one line naming the extra
if TYPE_CHECKING:
    _TorchModule = nn.Module
else:
    _TorchModule = nn.Module if torch_import.is_successful() else object


class RetrievalHead(_TorchModule):
    """Query and passage encoders over pooled final hidden states, and a linear scorer (see module docstring)."""

    def __init__(self, hidden_size: int, proj_dim: int = 256, config: HeadConfig | None = None) -> None:
        torch_import.check()
        super().__init__()
        if hidden_size < 1 or proj_dim < 1:
            raise ValueError(f"hidden_size and proj_dim must be >= 1, got {hidden_size} and {proj_dim}.")
        self.config = config or HeadConfig(hidden_size=hidden_size, proj_dim=proj_dim)
        self.query_encoder = nn.Sequential(nn.Linear(hidden_size, proj_dim), nn.Tanh())
        self.passage_encoder = nn.Sequential(nn.Linear(hidden_size, proj_dim), nn.Tanh())
        self.scorer = nn.Linear(3 * proj_dim, 1)

    def forward(
        self, hidden: torch.Tensor, passage_spans: Sequence[tuple[int, int]], query_span: tuple[int, int]
    ) -> torch.Tensor:
        """Scores (passages,) from one sequence's final hidden states ``hidden`` (T, d) (a leading 1 is dropped)."""
        if hidden.dim() == 3:
            if hidden.shape[0] != 1:
                raise ValueError("RetrievalHead scores one sequence at a time.")
            hidden = hidden[0]
        hidden = hidden.to(self.scorer.weight.dtype)
        h_c = self.passage_encoder(mean_pool(hidden, passage_spans))  # (n, p)
        h_q = self.query_encoder(mean_pool(hidden, [query_span]))  # (1, p)
        h_q = h_q.expand_as(h_c)
        return self.scorer(torch.cat([h_q, h_c, h_q * h_c], dim=-1)).squeeze(-1)

    def save(self, folder: str | os.PathLike) -> Path:
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file(
            {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}, str(folder / "model.safetensors")
        )
        (folder / "config.json").write_text(json.dumps(asdict(self.config), indent=1))
        return folder

    @classmethod
    def load(cls, path: str | os.PathLike) -> RetrievalHead:
        """Load from the head folder, or from a training output folder holding ``retrieval_head/``."""
        from safetensors.torch import load_file

        folder = find_head_folder(path)
        data = json.loads((folder / "config.json").read_text())
        if data.get("format") != HEAD_FORMAT:
            raise ValueError(
                f"{folder} is not a retrieval head (format {data.get('format')!r}, expected {HEAD_FORMAT!r})."
            )
        config = HeadConfig(**data)
        head = cls(config.hidden_size, config.proj_dim, config)
        head.load_state_dict(load_file(str(folder / "model.safetensors")))
        head.eval()
        return head


def find_head_folder(path: str | os.PathLike) -> Path:
    path = Path(path)
    for candidate in (path, path / HEAD_FOLDER):
        if (candidate / "config.json").exists() and (candidate / "model.safetensors").exists():
            try:
                if json.loads((candidate / "config.json").read_text()).get("format") == HEAD_FORMAT:
                    return candidate
            except json.JSONDecodeError:
                continue
    raise FileNotFoundError(
        f"No retrieval head at {path} (nor in {path / HEAD_FOLDER}). Train one with "
        "`icr2 train --config training/smollm2_cpu_retrieval_head.yaml`."
    )
