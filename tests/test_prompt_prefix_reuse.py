"""Prompt-prefix reuse with the real SmolLM2: a reply generated from the last prompt's key/value cache (cropped to
the prefix both prompts share) is the reply of the whole prompt in float32, on real corpus-in-context prompts with
the gold passage moved through the same passages (Lost in the Middle's positions); the reader's parameter
round-trips through YAML and is refused when it is not a bool; `icr2 compare`'s hash leaves it out, and
`PipelineSpec.from_file(reuse_prompt_prefix=True)` turns it on for the readers that take it."""

from pathlib import Path

import pytest
import yaml
from haystack import Pipeline
from haystack.dataclasses import ChatMessage

from icr2_components.kilt import KiltKnowledgeSource
from icr2_components.models.generation_prefix_cache import GenerationPrefixCache
from icr2_components.pipeline_loading import loads_pipeline
from icr2_components.pipeline_spec import PipelineSpec, behaviour_hash
from icr2_components.readers.local_chat_reader import LocalChatReader
from icr2_components.reorderers import GoldAtPositionReorderer
from icr2_components.text.templates import render_cic_prompt

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def moved_gold_prompts(sample_files):
    """Real ICR2 QA prompts over 6 real sample passages, the first one (the 'gold') at positions 1, 4 and 6 of the
    same 5 others, as `icr2 reproduce lost-in-the-middle` builds them; then a prompt of 2 other passages."""
    passages = []
    for document in KiltKnowledgeSource(sample_files.corpus).documents():
        passages.append(document)
        if len(passages) == 8:
            break
    gold = passages[0].__class__(content=passages[0].content, meta={**passages[0].meta, "origin": "gold"})
    reorderer = GoldAtPositionReorderer()
    question = f"what is {passages[0].meta.get('title', 'the first passage')} about?"
    prompts = []
    for position in (1, 4, 6):
        ordered = reorderer.run(documents=[gold, *passages[1:6]], position=position)["documents"]
        prompts.append([ChatMessage.from_user(render_cic_prompt("qa", question, ordered).text)])
    # the same instruction, other passages: only the template's start is shared
    prompts.append([ChatMessage.from_user(render_cic_prompt("qa", question, passages[6:8]).text)])
    return prompts


def test_replies_from_a_reused_prefix_equal_whole_prompts_in_float32(moved_gold_prompts, smollm2):
    whole = LocalChatReader(model="smollm2-135m-instruct", max_new_tokens=12, dtype="float32", device="cpu")
    reusing = LocalChatReader(model="smollm2-135m-instruct", max_new_tokens=12, dtype="float32", device="cpu",
                              reuse_prompt_prefix=True)
    expected = [whole.run(messages=m)["replies"][0] for m in moved_gold_prompts]
    got = [reusing.run(messages=m)["replies"][0] for m in moved_gold_prompts]
    assert [r.text for r in got] == [r.text for r in expected]
    assert all(r.text for r in got)
    for key in ("prompt_tokens", "completion_tokens", "finish_reason"):
        assert [r.meta[key] for r in got] == [r.meta[key] for r in expected], key
    reused = [r.meta["reused_tokens"] for r in got]
    tokens = [r.meta["prompt_tokens"] for r in got]
    # the first prompt runs whole; the gold at 4 shares only the template's start with the gold at 1 (below the
    # quarter of the prompt worth reusing), the gold at 6 the template and the 3 passages before position 4
    assert reused[:2] == [0, 0]
    assert tokens[2] / 4 <= reused[2] < tokens[2]
    assert reused[3] == 0  # other passages: only the instruction is shared
    assert "reused_tokens" not in expected[0].meta


def test_the_cache_refuses_batches_and_a_cache_of_the_callers(smollm2):
    import torch

    model, tokenizer = smollm2
    cache = GenerationPrefixCache()
    ids = tokenizer("the capital of France is", return_tensors="pt")["input_ids"]
    with pytest.raises(ValueError, match="one prompt at a time"):
        cache.generate(model, ids.repeat(2, 1), max_new_tokens=2)
    with pytest.raises(ValueError, match="cache itself"):
        cache.generate(model, ids, past_key_values=None, max_new_tokens=2)
    output, reused = cache.generate(model, ids, torch.ones_like(ids), max_new_tokens=2, do_sample=False)
    assert reused == 0 and output.shape[1] == ids.shape[1] + 2
    # the same prompt again: all but its last token come from the cache (min_reuse_tokens=1 here)
    short = GenerationPrefixCache(min_reuse_tokens=1)
    short.generate(model, ids, max_new_tokens=2, do_sample=False)
    again, reused = short.generate(model, ids, max_new_tokens=2, do_sample=False)
    assert reused == ids.shape[1] - 1 and again.tolist() == output.tolist()
    # a generate that fails takes the kept cache with it (generate extends it in place): the next prompt runs whole
    with pytest.raises(ValueError):
        short.generate(model, ids, max_new_tokens=0, do_sample=False)
    after, reused = short.generate(model, ids, max_new_tokens=2, do_sample=False)
    assert reused == 0 and after.tolist() == output.tolist()


@pytest.mark.parametrize("kwargs", [{"min_reuse_tokens": 0}, {"min_reuse_tokens": True}, {"min_reuse_fraction": 1.5},
                                    {"min_reuse_fraction": "0.5"},
                                    {"max_cached_tokens": 4, "min_reuse_tokens": 16}, {"max_cached_tokens": "8"}])
@pytest.mark.unit
def test_cache_sizes_are_checked(kwargs):
    with pytest.raises(ValueError):
        GenerationPrefixCache(**kwargs)


def test_the_reader_parameter_round_trips_through_yaml_and_is_checked():
    pipeline = Pipeline()
    pipeline.add_component("reader", LocalChatReader(model="smollm2-135m-instruct", reuse_prompt_prefix=True))
    loaded = loads_pipeline(pipeline.dumps())  # Haystack's loads with our package on the allowlist
    assert loaded.get_component("reader").reuse_prompt_prefix is True
    assert LocalChatReader().reuse_prompt_prefix is False
    with pytest.raises((TypeError, ValueError), match="reuse_prompt_prefix"):
        LocalChatReader(reuse_prompt_prefix="yes")


@pytest.mark.unit
def test_compare_hash_leaves_prefix_reuse_out_and_the_spec_turns_it_on(tmp_path):
    data = yaml.safe_load((ROOT / "pipelines" / "oracle.yaml").read_text())
    with_reuse = yaml.safe_load((ROOT / "pipelines" / "oracle.yaml").read_text())
    with_reuse["components"]["reader"]["init_parameters"]["reuse_prompt_prefix"] = True
    assert behaviour_hash(with_reuse) == behaviour_hash(data)
    other = yaml.safe_load((ROOT / "pipelines" / "oracle.yaml").read_text())
    other["components"]["reader"]["init_parameters"]["max_new_tokens"] = 31
    assert behaviour_hash(other) != behaviour_hash(data)  # an answer-changing parameter still counts

    plain = PipelineSpec.from_file(str(ROOT / "pipelines" / "oracle.yaml"))
    reusing = PipelineSpec.from_file(str(ROOT / "pipelines" / "oracle.yaml"), reuse_prompt_prefix=True)
    assert reusing.hash == plain.hash
    assert reusing.pipeline(controlled=False).get_component("reader").reuse_prompt_prefix is True
    assert plain.pipeline(controlled=False).get_component("reader").reuse_prompt_prefix is False
    # a pipeline whose components take no such parameter loads as it is
    closed = PipelineSpec.from_file(str(ROOT / "pipelines" / "closed_book.yaml"), reuse_prompt_prefix=True)
    assert closed.hash == PipelineSpec.from_file(str(ROOT / "pipelines" / "closed_book.yaml")).hash


def test_compare_records_the_setting_in_its_report(tmp_path, monkeypatch):
    """Nothing is answered here (report only): the run section says whether prefixes were reused."""
    from icr2_components.evaluation.compare.run import run_compare

    monkeypatch.chdir(ROOT)
    report = run_compare(["closed_book"], limit=1, out_dir=tmp_path, context_types=["open"], report_only=True,
                         progress=False, reuse_prompt_prefix=True)
    assert report["run"]["reuse_prompt_prefix"] is True
    assert report["run"]["counters"]["model_runs"] == 0
    with pytest.raises((TypeError, ValueError), match="reuse_prompt_prefix"):
        run_compare(["closed_book"], limit=1, out_dir=tmp_path, report_only=True, reuse_prompt_prefix="yes")
