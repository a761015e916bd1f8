"""The tiny-world data pipeline: deterministic corpus, clean held-out split, gradable math, matching tokenizer."""

from __future__ import annotations

import ast
import json
import random
import re
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from hf_specgen.training import corpus
from hf_specgen.training.tokenizer import train_tokenizer

# Small sizes keep the whole file well under a minute on two CPU cores.
SMALL = dict(max_code_files=30, n_math_train=300, n_math_eval=40)
OUTPUT_FILES = ("train.jsonl", "eval_code.jsonl", "eval_math.jsonl", "eval_prose.jsonl", "pretrain.jsonl",
                "stats.json")
INSTRUCTIONS = {"complete": "Complete this function:\n", "explain": "Explain what this code does:\n",
                "continue": "Continue the text:\n", "solve": "Solve: "}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corpus")
    corpus.build_corpus(out, seed=0, **SMALL)
    return out


@pytest.fixture(scope="module")
def splits() -> corpus.CorpusSplits:
    return corpus.build_records(seed=0, **SMALL)


@pytest.fixture(scope="module")
def tokenizer_dir(splits, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tokenizer")
    documents = corpus.pretraining_documents(splits, seed=0)
    train_tokenizer(corpus.iter_pretraining_text(documents), out, vocab_size=512)
    return out


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir):
    # Reload from disk: what later training steps see is the saved folder, not the in-memory object.
    return AutoTokenizer.from_pretrained(tokenizer_dir)


# ------------------------------------------------------------------------------------------------------------------
# Corpus
# ------------------------------------------------------------------------------------------------------------------

def test_same_seed_gives_identical_files(built, tmp_path):
    corpus.build_corpus(tmp_path, seed=0, **SMALL)
    for name in OUTPUT_FILES:
        assert (tmp_path / name).read_bytes() == (built / name).read_bytes(), name


def test_different_seed_changes_math_but_not_heldout_files():
    a = corpus.build_records(seed=0, max_code_files=10, n_math_train=50, n_math_eval=10)
    b = corpus.build_records(seed=1, max_code_files=10, n_math_train=50, n_math_eval=10)
    assert [r["prompt"] for r in a.eval_math] != [r["prompt"] for r in b.eval_math]
    # The held-out split is a property of the file path, not of the seed.
    assert all(corpus.is_heldout(f.rel_path) for f in a.eval_files + b.eval_files)
    assert not any(corpus.is_heldout(f.rel_path) for f in a.train_files + b.train_files)


def test_output_files_and_stats(built, splits):
    for name in OUTPUT_FILES:
        assert (built / name).stat().st_size > 0, name
    stats = json.loads((built / "stats.json").read_text())
    train = corpus.read_jsonl(built / "train.jsonl")
    assert sum(stats["records"]["train"].values()) == len(train)
    assert set(stats["records"]["train"]) == set(corpus.DOMAINS)
    assert stats["records"]["eval_math"] == SMALL["n_math_eval"]
    assert stats["chars"]["train"]["math"] == sum(len(r["prompt"] + r["response"]) for r in train
                                                  if r["domain"] == "math")
    # The in-memory builder and the files agree.
    assert train == splits.train


def test_records_are_well_formed(splits):
    every = splits.train + splits.eval_code + splits.eval_math + splits.eval_prose
    assert splits.eval_code and splits.eval_prose and splits.eval_math
    for record in every:
        assert record["domain"] in corpus.DOMAINS
        assert record["prompt"].startswith(INSTRUCTIONS[record["task"]])
        assert record["response"].strip()
        assert not corpus.contains_special_token(record["prompt"] + record["response"])
        assert len(record["prompt"]) + len(record["response"]) <= corpus.MAX_RECORD_CHARS + 40
    for record in splits.train + splits.eval_code:
        if record["task"] == "complete":
            # Header + body must reassemble into a function that parses.
            source = record["prompt"].removeprefix(INSTRUCTIONS["complete"]) + "\n" + record["response"] + "\n"
            ast.parse(source, filename=record["id"])  # parse, not compile: nested defs may use ``nonlocal``


def test_heldout_is_disjoint_from_training(splits):
    train_sources = {r["source"] for r in splits.train if "source" in r}
    eval_records = splits.eval_code + splits.eval_prose
    assert {r["source"] for r in eval_records} <= {f.rel_path for f in splits.eval_files}
    assert not train_sources & {f.rel_path for f in splits.eval_files}
    assert not {f.rel_path for f in splits.train_files} & {f.rel_path for f in splits.eval_files}

    train_prompts = {r["prompt"] for r in splits.train}
    for record in eval_records + splits.eval_math:
        assert record["prompt"] not in train_prompts, record["id"]

    # No evaluation prompt content occurs anywhere in the pretraining text (raw files, passages, chat pairs).
    documents = corpus.pretraining_documents(splits, seed=0)
    pretrain_text = "\x00".join(d["text"] for d in documents)
    for record in eval_records + splits.eval_math:
        content = record["prompt"].removeprefix(INSTRUCTIONS[record["task"]])
        assert content not in pretrain_text, record["id"]
    eval_file_texts = {f.text for f in splits.eval_files}
    assert not any(d["text"] in eval_file_texts for d in documents if d["kind"] == "file")


def test_pretraining_documents_mix_all_domains(splits):
    documents = corpus.pretraining_documents(splits, seed=0)
    kinds = {(d["domain"], d["kind"]) for d in documents}
    assert {("code", "file"), ("code", "chat"), ("prose", "chat"), ("prose", "passage"), ("math", "chat")} <= kinds
    assert all(corpus.MASK_TOKEN not in d["text"] for d in documents)
    chat = next(d for d in documents if d["kind"] == "chat")["text"]
    assert chat.startswith(corpus.USER_TOKEN + "\n") and chat.endswith(corpus.END_TOKEN)


# ------------------------------------------------------------------------------------------------------------------
# Math
# ------------------------------------------------------------------------------------------------------------------

_EQUATION = re.compile(r"((?:\d+\s*[-+*/]\s*)+\d+)\s*=\s*(\d+)")


def test_math_problems_are_correct_and_checkable():
    records = corpus.math_records(1500, seed=3, split="train")
    assert {r["template"] for r in records} == set(corpus.MATH_TEMPLATES)
    assert {r["num_steps"] for r in records} == {2, 3, 4}
    for record in records:
        solution = record["response"]
        assert solution.splitlines()[-1] == f"#### {record['answer']}"
        assert record["answer"] >= 0
        # Every equation in the worked solution is arithmetically true (and uses exact division).
        equations = _EQUATION.findall(solution)
        assert len(equations) >= record["num_steps"], record
        for expression, result in equations:
            if "/" in expression:  # problems are built so that every division is exact
                dividend, divisor = (int(x) for x in expression.split("/"))
                assert dividend % divisor == 0, expression
            assert eval(expression) == int(result), (expression, result, record["prompt"])  # digits and + - * / only
        assert corpus.check_answer(record, solution)
        assert corpus.check_answer(record, "Some reasoning.\n#### " + str(record["answer"]) + "\n")
        assert not corpus.check_answer(record, solution.rsplit("####", 1)[0] + f"#### {record['answer'] + 1}")
        assert not corpus.check_answer(record, solution.rsplit("####", 1)[0])  # no final-answer marker


def test_extract_answer_formats():
    assert corpus.extract_answer("x\n#### 1,200") == 1200
    assert corpus.extract_answer("#### 3\n#### -4") == -4
    assert corpus.extract_answer("#### 2.5") == 2.5
    assert corpus.extract_answer("the answer is 7") is None


def test_eval_math_is_seeded_and_excluded_from_training(splits):
    again = corpus.math_records(SMALL["n_math_eval"], seed=0, split="eval")
    assert again == splits.eval_math
    eval_questions = {r["prompt"] for r in splits.eval_math}
    assert not eval_questions & {r["prompt"] for r in splits.train if r["domain"] == "math"}


# ------------------------------------------------------------------------------------------------------------------
# Tokenizer
# ------------------------------------------------------------------------------------------------------------------

def test_tokenizer_special_tokens(tokenizer):
    ids = tokenizer.convert_tokens_to_ids(list(corpus.SPECIAL_TOKENS))
    assert ids == list(range(len(corpus.SPECIAL_TOKENS)))
    assert len(tokenizer) == 512
    assert tokenizer.pad_token == corpus.PAD_TOKEN and tokenizer.eos_token == corpus.END_TOKEN
    assert tokenizer.mask_token == corpus.MASK_TOKEN
    # Each marker is one atomic token when it appears in text.
    for token, token_id in zip(corpus.SPECIAL_TOKENS, ids):
        assert tokenizer(f"a{token}b", add_special_tokens=False)["input_ids"].count(token_id) == 1


def test_chat_template_matches_corpus_format(tokenizer, splits):
    rng = random.Random(0)
    for record in rng.sample(splits.train, 20) + splits.eval_code[:3] + splits.eval_math[:3]:
        user = {"role": "user", "content": record["prompt"]}
        assistant = {"role": "assistant", "content": record["response"]}
        assert tokenizer.apply_chat_template([user, assistant], tokenize=False) == corpus.format_record(record)
        prompt = tokenizer.apply_chat_template([user], tokenize=False, add_generation_prompt=True)
        assert prompt == corpus.format_record(record, with_response=False)
        assert prompt + "\n" + record["response"] + corpus.END_TOKEN == corpus.format_record(record)
    conversation = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                    {"role": "user", "content": "Solve: 2 + 2"}]
    assert (tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
            == corpus.format_messages(conversation, add_generation_prompt=True))
    with pytest.raises(Exception):
        tokenizer.apply_chat_template([{"role": "system", "content": "x"}], tokenize=False)


def test_generation_prompt_then_answer_tokens_are_the_training_tokens(tokenizer, splits):
    # The model is trained on whole chat texts. A generation prompt is only right if the prompt's tokens followed by
    # the answer's tokens (what generation produces) equal the training text's tokens: a prompt ending in "\n" would
    # split the newline from a code answer's indentation, which BPE merges ("\n   ", " x") in training.
    code = [r for r in splits.train if r["domain"] == "code"][:10]
    assert code and all(r["response"].startswith("    ") for r in code)
    for record in code + splits.eval_math[:3]:
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": record["prompt"]}], tokenize=False,
                                               add_generation_prompt=True)
        answer_ids = tokenizer("\n" + record["response"] + corpus.END_TOKEN, add_special_tokens=False)["input_ids"]
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        assert prompt_ids + answer_ids == tokenizer(corpus.format_record(record), add_special_tokens=False)["input_ids"]
        assert corpus.response_text(tokenizer.decode(answer_ids[:-1])) == record["response"]


def test_mask_token_never_in_training_text(tokenizer, splits):
    documents = corpus.pretraining_documents(splits, seed=0)
    texts = list(corpus.iter_pretraining_text(documents))
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    mask_id, user_id = tokenizer.mask_token_id, tokenizer.convert_tokens_to_ids(corpus.USER_TOKEN)
    assert all(mask_id not in ids for ids in encoded)
    assert any(user_id in ids for ids in encoded)  # sanity: markers in chat documents are recognized


def test_encode_decode_round_trip(tokenizer, splits):
    samples = [corpus.format_record(r) for r in splits.train[:50] + splits.eval_prose[:5]]
    samples += [f.text for f in splits.eval_files]
    samples += ["  tabs\tand  spaces \n\n\ttrailing  ", "unicode: café – 東京 🙂", "x = 12345 + 0.5", ""]
    for text in samples:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids, skip_special_tokens=False) == text
    # Digits are single tokens (a leading space may be attached to the first one).
    pieces = tokenizer.tokenize("9876543")
    assert len(pieces) == 7
