"""The Elasticsearch writer's settings: one checked object, refused with one line naming the field."""

import inspect

import pytest

from icr2_components.stores.elasticsearch.writer import ElasticsearchStreamingWriter, StreamingWriterSettings


@pytest.mark.unit
def test_the_writer_takes_hosts_index_settings_and_a_client():
    parameters = list(inspect.signature(ElasticsearchStreamingWriter.__init__).parameters)
    assert parameters == ["self", "hosts", "index", "settings", "client"]


@pytest.mark.unit
def test_the_writer_keeps_its_settings_and_derives_checkpoint_and_fingerprint(tmp_path):
    settings = StreamingWriterSettings(batch_size=7, checkpoint_path=tmp_path / "c.json", fingerprint="corpus-a")
    writer = ElasticsearchStreamingWriter("http://127.0.0.1:9200", "some-index", settings)
    assert writer.settings is settings and writer.checkpoint_path == tmp_path / "c.json"
    other = ElasticsearchStreamingWriter(
        "http://127.0.0.1:9200", "some-index", StreamingWriterSettings(fingerprint="corpus-b")
    )
    assert writer.fingerprint != other.fingerprint
    assert ElasticsearchStreamingWriter().settings == StreamingWriterSettings()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("batch_size", 0, "batch_size must be a positive integer, got 0."),
        ("thread_count", -1, "thread_count must be a positive integer, got -1."),
        ("checkpoint_every", 1.5, "checkpoint_every must be a positive integer, got 1.5."),
        ("checkpoint_seconds", 0, "checkpoint_seconds must be a positive number of seconds, got 0."),
        ("request_timeout", True, "request_timeout must be a positive number of seconds, got True."),
        ("max_retries", -1, "max_retries must be a non-negative integer, got -1."),
        ("retry_backoff", -0.5, "retry_backoff must be a non-negative number of seconds, got -0.5."),
        ("max_failures", -3, "max_failures must be a non-negative integer or None (never stop), got -3."),
        ("load_replicas", -1, "load_replicas must be a non-negative integer or None"),
        ("force_merge_segments", 0, "force_merge_segments must be a positive integer or None (no merge), got 0."),
    ],
)
@pytest.mark.unit
def test_a_bad_setting_is_refused_naming_it(field, value, message):
    with pytest.raises(ValueError) as raised:
        StreamingWriterSettings(**{field: value})
    assert str(raised.value).startswith(message)


@pytest.mark.unit
def test_settings_of_another_type_are_refused():
    with pytest.raises(TypeError, match=r"settings must be a StreamingWriterSettings, got dict\."):
        ElasticsearchStreamingWriter("http://127.0.0.1:9200", "some-index", {"batch_size": 10})
