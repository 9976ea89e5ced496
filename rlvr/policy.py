"""Policies: the tiny default (a Qwen3-architecture model with a character tokenizer, built locally)
and loading a pretrained causal LM from a folder.

The tiny default needs no hub and no download: its tokenizer is built with `tokenizers` from a
fixed alphabet, its weights from a seeded random init.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
# Every printable ASCII character, newline included; anything else maps to <unk>.
ALPHABET = string.printable.replace("\x0b", "").replace("\x0c", "").replace("\r", "")


def build_char_tokenizer():
    """A PreTrainedTokenizerFast that maps each character to one token (no BOS, EOS = <eos>).

    Decoding fuses tokens back without spaces (decoders.Fuse), so decode(encode(s)) == s.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate([PAD, EOS, UNK, *ALPHABET])}
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, eos_token=EOS,
                                   unk_token=UNK, padding_side="left")


@dataclass(frozen=True)
class TinySize:
    """Sizes of the tiny Qwen3 default (0.5M parameters with the defaults)."""
    hidden_size: int = 128
    intermediate_size: int = 512
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 256


def build_tiny_model(tokenizer, size: TinySize = TinySize(), seed: int = 0):
    """A randomly initialised Qwen3ForCausalLM sized by `size`, deterministic in `seed`."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden_size,
        intermediate_size=size.intermediate_size,
        num_hidden_layers=size.num_hidden_layers,
        num_attention_heads=size.num_attention_heads,
        num_key_value_heads=size.num_key_value_heads,
        head_dim=size.hidden_size // size.num_attention_heads,
        max_position_embeddings=size.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model


def save_policy(model, tokenizer, folder: str | Path) -> Path:
    """Save model and tokenizer so that `from_pretrained(folder)` (and TRL's reference model) load them."""
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def load_policy(folder: str | Path):
    """Model and tokenizer from a Hugging Face folder (or a hub id where the network allows)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    return model, tokenizer
