"""The connection keys of an Elasticsearch ``store:`` section (hosts, basic auth, API key, TLS CA file).

- wrong values are refused when the config is loaded, with a one-line error naming the key;
- basic auth reads the password from the environment, never from the file, and a serialised document store
  (what a pipeline YAML would hold) does not carry it;
- the same config, with the connection keys set, loads and reads an index on the real node.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from icr2_components.stores.config import ConfigError, load_index_config
from icr2_components.stores.elasticsearch.connection import connection_options
from icr2_components.stores.elasticsearch.store import build_elasticsearch_store
from icr2_components.stores.elasticsearch.writer import ElasticsearchStreamingWriter


def write_config(tmp_path: Path, **store) -> Path:
    path = tmp_path / "cluster.yaml"
    data = {
        "store": {"type": "elasticsearch", "index": "icr2-es-cluster-connection", **store},
        "corpus": {"path": "sample"},
        "embedding": {"enabled": False},
    }
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.unit
def test_a_missing_ca_file_is_refused_naming_the_key(tmp_path):
    path = write_config(tmp_path, hosts=["https://es1.internal:9200"], ca_certs=str(tmp_path / "missing.pem"))
    with pytest.raises(ConfigError, match=r"store\.ca_certs: no file at"):
        load_index_config(path)


@pytest.mark.unit
def test_a_ca_file_without_an_https_host_is_refused(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    with pytest.raises(ConfigError, match=r"no host in store\.hosts is https"):
        load_index_config(write_config(tmp_path, hosts="http://127.0.0.1:9200", ca_certs=str(ca)))
    with pytest.raises(ConfigError, match="verify_certs is false"):
        load_index_config(
            write_config(tmp_path, hosts="https://es1.internal:9200", ca_certs=str(ca), verify_certs=False)
        )
    config = load_index_config(
        write_config(tmp_path, hosts=["https://es1.internal:9200", "https://es2.internal:9200"], ca_certs=str(ca))
    )
    assert connection_options(config.store) == {"ca_certs": str(ca)}


@pytest.mark.unit
def test_a_host_that_is_not_a_url_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="http:// or https:// URLs"):
        load_index_config(write_config(tmp_path, hosts="es1.internal:9200"))


def test_basic_auth_takes_the_password_from_the_environment_and_never_serialises_it(tmp_path, monkeypatch):
    config = load_index_config(
        write_config(
            tmp_path, hosts="http://127.0.0.1:9200", username="icr2_writer", password_env="ICR2_TEST_ES_PASSWORD"
        )
    )
    monkeypatch.delenv("ICR2_TEST_ES_PASSWORD", raising=False)
    monkeypatch.delenv("ELASTIC_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="ICR2_TEST_ES_PASSWORD"):
        connection_options(config.store)
    monkeypatch.setenv("ICR2_TEST_ES_PASSWORD", "s3cret-pw")
    options = connection_options(config.store)
    assert options["headers"]["authorization"].startswith("Basic ")
    store = build_elasticsearch_store(config)
    assert "s3cret-pw" not in repr(store.to_dict()) and "Basic" not in repr(store.to_dict())
    monkeypatch.setenv("ELASTIC_API_KEY", "a-key")
    with pytest.raises(ConfigError, match="ELASTIC_API_KEY is set too"):
        connection_options(config.store)


@pytest.mark.elasticsearch
def test_the_same_config_with_connection_keys_writes_and_reads_on_the_real_node(
    elasticsearch_url, es_client, sample_files, tmp_path, monkeypatch
):
    from icr2_components.kilt import KiltKnowledgeSource

    # the project's node has security off: the Authorization header is accepted and ignored, so this checks that
    # the keys reach the writer's and the store's clients without breaking them (a secured cluster is not at hand)
    monkeypatch.delenv("ELASTIC_API_KEY", raising=False)
    monkeypatch.setenv("ICR2_TEST_ES_PASSWORD", "s3cret-pw")
    index = "icr2-es-cluster-connection"
    es_client.indices.delete(index=index, ignore_unavailable=True)
    path = write_config(
        tmp_path, hosts=[elasticsearch_url], username="icr2_writer", password_env="ICR2_TEST_ES_PASSWORD"
    )
    config = load_index_config(path, overrides={"writer.checkpoint_path": str(tmp_path / "c.json")})
    try:
        documents = list(KiltKnowledgeSource(sample_files.corpus).documents())[:300]
        writer = ElasticsearchStreamingWriter.from_config(config, progress=False)
        assert writer.settings.client_options["headers"]["authorization"].startswith("Basic ")
        report = writer.write(documents)
        assert report.count_ok and report.index_count == 300
        store = build_elasticsearch_store(config)
        assert store.count_documents() == 300
        assert store._bm25_retrieval(documents[0].content[:80], top_k=3)
    finally:
        es_client.indices.delete(index=index, ignore_unavailable=True)
