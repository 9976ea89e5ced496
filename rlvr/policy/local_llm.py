"""model.init: local_llm: what a user gets from a hub model, built here with nothing downloaded.

A Qwen3ForCausalLM at reduced size (params.yaml model.local_llm), randomly initialised from the
seed, and a byte-level BPE tokenizer trained with `tokenizers` on the task's own text (the training
rows' prompts and answers), with Qwen's special tokens and a ChatML chat template. prepare_model
saves both as an ordinary Hugging Face folder, and every later stage loads it the way it loads a
hub model (from_pretrained; TRL's `model=<path>`).

As in Qwen3's instruct models, a turn ends with <|im_end|>, which is the tokenizer's eos (TRL and
evaluation stop on it, and an SFT example ends with it); <|endoftext|> pads, and generation stops
on either (generation_config.eos_token_id lists both, as Qwen3's does). As in Qwen, the tokenizer
has fewer tokens than the model has embedding rows: the model is padded up to vocab_size. Unlike
Qwen there is no NFC normaliser, so decode(encode(s)) == s for any string.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from rlvr.params.training_params import LocalLLMParams
from rlvr.rewards.verifiers import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    CountdownSearchExceeded,
    countdown_solution,
)

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
# Appended after the learned vocabulary, in Qwen's order.
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
# Qwen2/Qwen3's pre-tokenizer split: contractions, words, single digits (arithmetic sees each
# digit), punctuation runs, newlines, spaces.
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
    r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# ChatML as Qwen3 renders it, without tools and thinking: one block per message, then the
# assistant's header when a reply is to be generated.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def answer_texts(verifier: dict) -> list[str]:
    """What a right answer to a row looks like, as text the tokenizer should know.

    >>> answer_texts({"type": "countdown", "numbers": [3, 5], "target": 15})
    ['3*5', '<answer>3*5</answer>']
    >>> answer_texts({"type": "exact_match", "target": "Paris"})
    ['Paris', '<answer>Paris</answer>']
    >>> answer_texts({"type": "regex", "pattern": "^a+$"})
    []
    """
    kind = verifier.get("type")
    answer = None
    if kind in ("exact_match", "math"):
        answer = str(verifier.get("target", ""))
    elif kind == "countdown":
        try:
            answer = countdown_solution(
                list(verifier["numbers"]),
                int(verifier["target"]),
                bool(verifier.get("allow_division", False)),
            )
        except (KeyError, TypeError, ValueError, CountdownSearchExceeded):
            answer = None  # too many numbers to search, or a malformed row: its prompt still counts
    return [answer, f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"] if answer else []


def corpus(rows) -> list[str]:
    """The tokenizer's training text, in the rows' order: each row's prompt and answers as the
    chat template lays them out between its special tokens (role, newline, text), so that the
    role names are learned too (the pre-tokenizer splits them from the text that follows).

    >>> from rlvr.data.rows import Row
    >>> corpus([Row("r1", "3 5 -> 15: ", {"type": "countdown", "numbers": [3, 5], "target": 15})])
    ['user\\n3 5 -> 15: ', 'assistant\\n3*5', 'assistant\\n<answer>3*5</answer>']
    """
    texts = []
    for row in rows:
        texts.append(f"user\n{row.prompt}")
        texts.extend(f"assistant\n{answer}" for answer in answer_texts(dict(row.verifier)))
    return texts


def train_bpe_tokenizer(texts: Iterable[str], vocab_size: int):
    """A byte-level BPE PreTrainedTokenizerFast trained on `texts`, with at most vocab_size tokens
    (the learned ones, then Qwen's three special tokens) and the ChatML chat template.

    Deterministic: the same texts in the same order give the same tokenizer.json bytes.

    >>> tok = train_bpe_tokenizer(["12 + 34 = 46", "héllo wörld"] * 3, 300)
    >>> tok.decode(tok.encode("naïve ∑ 1+2")) == "naïve ∑ 1+2"
    True
    >>> tok.eos_token, tok.pad_token, len(tok) <= 300
    ('<|im_end|>', '<|endoftext|>', True)
    """
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL_TOKENS),
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(list(texts), trainer=trainer)
    core.add_special_tokens(list(SPECIAL_TOKENS))  # after the learned tokens, in Qwen's order
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=None,
        unk_token=None,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        additional_special_tokens=[IM_START],
        clean_up_tokenization_spaces=False,
        padding_side="left",
        model_max_length=None,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_local_llm_model(tokenizer, size: LocalLLMParams, seed: int = 0):
    """A randomly initialised Qwen3ForCausalLM with `size`'s shape (tied embeddings, as Qwen3's
    small models), padded to size.vocab_size rows, deterministic in `seed`."""
    if len(tokenizer) > size.vocab_size:
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} tokens, more than the model's "
            f"vocab_size {size.vocab_size}"
        )
    pad, eos = tokenizer.convert_tokens_to_ids([ENDOFTEXT, IM_END])
    config = Qwen3Config(
        vocab_size=size.vocab_size,
        hidden_size=size.hidden_size,
        intermediate_size=size.intermediate_size,
        num_hidden_layers=size.num_hidden_layers,
        num_attention_heads=size.num_attention_heads,
        num_key_value_heads=size.num_key_value_heads,
        head_dim=size.head_dim,
        max_position_embeddings=size.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=pad,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    # stop on the end of a turn or of a text, as Qwen3's generation_config.json does
    model.generation_config.eos_token_id = [eos, pad]
    model.generation_config.pad_token_id = pad
    model.generation_config.bos_token_id = pad
    return model


def build_local_llm(rows: Sequence, size: LocalLLMParams, seed: int = 0):
    """(model, tokenizer) for model.init: local_llm: the tokenizer trained on the rows' text."""
    tokenizer = train_bpe_tokenizer(corpus(rows), size.vocab_size)
    return build_local_llm_model(tokenizer, size, seed), tokenizer
