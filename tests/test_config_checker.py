"""One checker refuses unknown keys everywhere a mapping is read (strict_mapping.check_known_keys): index configs,
training recipes, backend files, served-model settings, gate artifacts and the decoding reader's rule parameters
all name the unknown key, where it was and the allowed ones, in the same words."""

from __future__ import annotations

import json

import pytest

from icr2_components.artifacts.gate_artifact import GateArtifact
from icr2_components.backends import BackendError
from icr2_components.backends.pipelines import backend_from_dict
from icr2_components.models.served_model import ServedModel
from icr2_components.readers.context_aware_decoding_reader import ContextAwareDecodingReader
from icr2_components.stores.config import ConfigError, index_config_from_dict
from icr2_components.strict_mapping import check_known_keys
from icr2_components.training.recipe import RecipeError, recipe_from_dict


def test_check_known_keys_names_the_unknown_and_the_allowed():
    check_known_keys({"a": 1}, {"a", "b"}, "here")  # known keys pass
    with pytest.raises(
        RuntimeError, match=r"unknown key\(s\) \['c', 'd'\] in here; allowed keys: \['a', 'b'\]\. Try a\.$"
    ):
        check_known_keys({"a": 1, "d": 2, "c": 3}, ["b", "a"], "here", RuntimeError, hint="Try a.")


def test_every_reader_of_a_mapping_uses_it(tmp_path):
    cases = [
        (
            lambda: index_config_from_dict({"store": {"type": "in_memory"}, "corpus": {}, "stor": {}}, "x.yaml"),
            ConfigError,
            "['stor'] in the top level of x.yaml; allowed keys: ['corpus', 'embedding', 'name', 'store'",
        ),
        (
            lambda: recipe_from_dict({"method": "sft-da", "lr": 1}, "r.yaml"),
            RecipeError,
            "['lr'] in r.yaml; allowed keys: [",
        ),
        (
            lambda: backend_from_dict({"kind": "local", "temperature": 0}, "b.yaml"),
            BackendError,
            "['temperature'] in b.yaml (kind: local); allowed keys: ['model']",
        ),
        (
            lambda: ServedModel.from_dict({"api_base_url": "http://h/v1", "model": "m", "port": 1}, "served"),
            ValueError,
            "['port'] in served; allowed keys: ['api_base_url', 'api_key_env', 'context_length'",
        ),
    ]
    artifact = tmp_path / "gate.json"
    artifact.write_text(json.dumps({"format": "icr2-gate/1", "colour": "red"}))
    cases.append((lambda: GateArtifact.load(artifact), ValueError, f"['colour'] in {artifact}; allowed keys: ["))
    for call, error, words in cases:
        with pytest.raises(error) as raised:
            call()
        assert "unknown key(s) " + words in str(raised.value), str(raised.value)
    with pytest.raises(
        ValueError,
        match=r"unknown parameters \['coiecd_alfa'\] in ContextAwareDecodingReader; allowed parameters: "
        r"\[.*'coiecd_alpha'.*\]\. Did you mean 'coiecd_alpha' for 'coiecd_alfa'\? A decoding rule's own parameters "
        r"are named <rule>_<parameter>\.",
    ):
        ContextAwareDecodingReader._checked_rule_parameters({"coiecd_alfa": 0.5})
