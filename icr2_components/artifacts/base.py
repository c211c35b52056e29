"""What the probed-head artifacts (RAP's retrieval heads, PH3's context/memory heads) share: JSON save and load
with a format check, and the check that an artifact was probed on the model it is used with.

Head indices only mean something for the model (name and shape) they were probed on, so every artifact records
both and refuses another model with a message that says how to make the right artifact.

Every artifact also records the ids of the questions (instances) it was probed on, ``probed_ids`` (None: not
recorded, an artifact made before ids were kept), with ``probed_ids_note`` saying how they were obtained when
the probe did not record them itself. ``icr2 compare`` keeps those questions out of its evaluation
(``evaluation.compare.held_out``), so a technique is never scored on the questions its heads were chosen on.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

from icr2_components.resources.lookup import resolve_file
from icr2_components.strict_mapping import dataclass_from_mapping


class ArtifactMismatchError(ValueError):
    """A head artifact made for another model than the reader it is used with."""


def _read_json(path: Path, what: str) -> dict:
    """The JSON object at ``path``; a folder, a file that is not JSON or not an object is refused, naming it."""
    if path.is_dir():
        raise ValueError(f"{path} is a folder, not {what}.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not {what}: {error}.") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not {what}: it holds a JSON {type(data).__name__}, not an object.")
    return data


def read_probed_ids(path: str | os.PathLike) -> tuple[list[str] | None, str]:
    """``(probed_ids, probed_ids_note)`` of any head artifact file, without building the artifact."""
    path = resolve_file("artifacts", path)  # a path, or a shipped artifact's name
    if not path.exists():
        raise FileNotFoundError(f"Head artifact not found: {path}.")
    data = _read_json(path, "a head artifact (JSON)")
    if not isinstance(data, dict) or "format" not in data:
        raise ValueError(f"{path} is not a head artifact (a JSON object with a `format`).")
    ids = data.get("probed_ids")
    if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, str) for i in ids)):
        raise ValueError(f"{path}: probed_ids must be a list of question id strings, got {type(ids).__name__}.")
    return ids, str(data.get("probed_ids_note") or "")


def describe_signature(signature: dict[str, Any]) -> str:
    return f"{signature.get('architecture')}, {signature.get('num_layers')} layers x {signature.get('num_heads')} heads"


class HeadArtifactIO:
    """Mixin for artifact dataclasses with ``model``, ``model_signature``, ``probed_ids``, ``probed_ids_note`` and
    ``format`` fields.

    Subclasses set ``FORMAT`` (the ``format`` value they write), ``KIND`` (a name for messages) and ``MAKE_WITH``
    (how a user makes one).
    """

    FORMAT: ClassVar[str]
    KIND: ClassVar[str]
    MAKE_WITH: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike):
        path = resolve_file("artifacts", path)  # a path, or a shipped artifact's name
        if not path.exists():
            raise FileNotFoundError(f"{cls.KIND} artifact not found: {path}. Make one with {cls.MAKE_WITH}.")
        data = _read_json(path, f"a {cls.KIND} artifact (JSON); make one with {cls.MAKE_WITH}")
        if data.get("format") != cls.FORMAT:
            raise ValueError(
                f"{path} is not a {cls.KIND} artifact (format {data.get('format')!r}, expected {cls.FORMAT!r})."
            )
        fields = dataclasses.fields(cls)
        unknown = sorted(set(data) - {f.name for f in fields})
        missing = [f.name for f in fields if f.name not in data and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        if unknown or missing:
            raise ValueError(f"{path} is not a whole {cls.KIND} artifact: " + "; ".join(
                ([f"unknown key(s) {unknown}"] if unknown else []) + ([f"no {missing}"] if missing else []))
                + f". Make it again with {cls.MAKE_WITH}.")
        signature = data.get("model_signature")
        shape = ("num_layers", "num_heads")
        if not isinstance(signature, dict) or any(isinstance(signature.get(k), bool)
                                                  or not isinstance(signature.get(k), int) for k in shape):
            raise ValueError(f"{path}: model_signature must hold the probed model's num_layers and num_heads as "
                             f"integers, got {signature!r:.120}. Make it again with {cls.MAKE_WITH}.")
        # every key against its declared type (strict: "3" is not M=3, a NaN hit rate is not a rate)
        return dataclass_from_mapping(cls, data, str(path), ValueError)

    def check_model(self, model_name: str, signature: dict[str, Any]) -> None:
        """Raise :class:`ArtifactMismatchError` unless ``model_name``/``signature`` are the probed model's."""
        from icr2_components.models.resolver import resolve_model

        same_name = model_name == self.model or resolve_model(model_name) == resolve_model(self.model)
        if not same_name or signature != self.model_signature:
            raise ArtifactMismatchError(
                f"These {self.KIND} heads were probed on {self.model} ({describe_signature(self.model_signature)}) but "
                f"the reader is {model_name} ({describe_signature(signature)}). Probe this reader ({self.MAKE_WITH}) "
                "and use that artifact."
            )
