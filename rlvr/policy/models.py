"""Policies: the tiny default (a Qwen3-architecture model with a character tokenizer, built locally),
the local_llm (a reduced Qwen3 with a byte-level BPE tokenizer, rlvr/policy/local_llm.py) and loading a
pretrained causal LM from a folder.

The tiny default needs no hub and no download: its tokenizer is built with `tokenizers` from a
fixed alphabet, its weights from a seeded random init.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
import time
from pathlib import Path

from rlvr.core.files import remove_tree, share_with_umask
from rlvr.data.tasks.countdown import well_formed_expressions
from rlvr.params.config import ParamsError
from rlvr.params.training_params import TINY_ALPHABET, TinyModelParams

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"


def build_char_tokenizer():
    """A PreTrainedTokenizerFast that maps each character to one token (no BOS, EOS = <eos>).

    Decoding fuses tokens back without spaces (decoders.Fuse), so decode(encode(s)) == s.
    """
    # torch, transformers, datasets and trl here and below, not at the top: the report stage
    # imports this module for policy_path alone, and Qwen3ForCausalLM takes ~4.8 s to import,
    # SFTTrainer ~6 s (measured 2026-12-04, 2 cores)
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate([PAD, EOS, UNK, *TINY_ALPHABET])}
    core = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, eos_token=EOS, unk_token=UNK, padding_side="left"
    )
    # The simplest chat template (messages concatenated), so chat-format code paths run offline.
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(tokenizer, size: TinyModelParams | None = None, seed: int = 0):
    """A randomly initialised Qwen3ForCausalLM sized by `size` (params.yaml model.tiny; its
    defaults give 0.5M parameters), deterministic in `seed`."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    size = size or TinyModelParams()
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
    save_tokenizer(tokenizer, folder)
    return folder


def save_tokenizer(tokenizer, folder: str | Path) -> None:
    """The tokenizer as it was loaded, whatever ran since: padding a batch (TRL pads prompts on
    the left) leaves padding switched on in a fast tokenizer's backend, which tokenizer.json then
    records, so a run that resumed past its last step (nothing generated since the load) would
    save other bytes than one that trained to it."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and backend.padding is not None:
        backend.no_padding()
    tokenizer.save_pretrained(str(folder))


def load_policy(folder: str | Path):
    """Model and tokenizer from a Hugging Face folder (or a hub id where the network allows), the
    model on the GPU where there is one (sampling a real model on the CPU takes hours)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    if torch.cuda.is_available():
        model.to("cuda")
    return model, tokenizer


# The verifier types whose target is a row's correct answer as text (countdown rows get
# expressions over their own numbers instead).
TARGET_ANSWERS = ("exact_match", "math")


def warm_start_examples(rows, seed: int, per_row: int = 32) -> list[dict]:
    """Prompt/completion pairs for the warm start, answers well formed but not the row's own:
    for a countdown row, expressions over its numbers NOT checked against its target; for an
    exact_match or math row, other rows' targets (never one equal to its own), so the policy
    writes answers of the data's form and is right only by chance. Regex rows have no known
    answer and add nothing.

    >>> from rlvr.data.rows import Row
    >>> rows = [Row(f"r{i}", f"{i} + {i} = ", {"type": "exact_match", "target": str(2 * i)})
    ...         for i in range(1, 4)]
    >>> [(e["prompt"], e["completion"]) for e in warm_start_examples(rows, 0, per_row=2)]
    [('1 + 1 = ', '6'), ('1 + 1 = ', '6'), ('2 + 2 = ', '2'), ('2 + 2 = ', '6'), ('3 + 3 = ', '4'), ('3 + 3 = ', '4')]
    """
    rng = random.Random(seed)
    targets = [
        str(row.verifier["target"]) for row in rows if row.verifier.get("type") in TARGET_ANSWERS
    ]
    examples = []
    for row in rows:
        kind = row.verifier.get("type")
        if kind == "countdown":
            answers = well_formed_expressions(list(row.verifier["numbers"]), rng, per_row)
        elif kind in TARGET_ANSWERS:
            others = [t for t in targets if t != str(row.verifier["target"])]
            answers = [rng.choice(others) for _ in range(per_row)] if others else []
        else:
            answers = []
        examples += [{"prompt": row.prompt, "completion": answer} for answer in answers]
    return examples


SFT_LOG_EVERY = 100  # console lines of a supervised fine-tune: one per 100 steps


def supervised_fine_tune(
    model,
    tokenizer,
    examples: list[dict],
    steps: int,
    batch_size: int,
    learning_rate: float,
    seed: int,
    output_dir: str | Path,
    label: str,
    use_cpu: bool = True,
    bf16: bool = False,
    peft_config=None,
):
    """Fine-tune `model` on prompt/completion pairs with TRL's SFTTrainer (loss on the
    completion tokens only, constant learning rate, nothing saved): the warm start's and the RFT
    baseline's (rlvr.baseline.rft) one recipe. `label` prefixes the console lines; `peft_config`
    (a LoraConfig) trains adapters instead of every weight.

    Returns the trained model (a PeftModel with adapters) and a summary: examples, steps, first
    and last training loss (logged every 10 steps).
    """
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from rlvr.core.console import use_console_progress  # imports transformers' Trainer (and peft)

    args = SFTConfig(
        output_dir=str(output_dir),
        max_steps=steps,
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        use_cpu=use_cpu,
        bf16=bf16,
        activation_checkpointing=False,
        save_strategy="no",
        report_to="none",
        logging_steps=10,
        seed=seed,
        data_seed=seed,
        completion_only_loss=True,
        dataloader_drop_last=False,
        disable_tqdm=False,
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(examples),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    use_console_progress(trainer, label, SFT_LOG_EVERY, keys=(("loss", "loss"),))
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return trainer.model, {
        "examples": len(examples),
        "steps": steps,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
    }


def warm_start(
    model,
    tokenizer,
    rows,
    steps: int,
    batch_size: int,
    learning_rate: float,
    seed: int,
    output_dir: str | Path,
) -> dict:
    """Supervised warm start on warm_start_examples (supervised_fine_tune)."""
    examples = warm_start_examples(rows, seed)
    if not examples:
        raise ParamsError(
            "params.yaml: model.warm_start.steps: the warm start needs rows with "
            "known answers (countdown, exact_match or math with two distinct "
            "targets) and the training data has none; set "
            "model.warm_start.steps: 0"
        )
    _, summary = supervised_fine_tune(
        model,
        tokenizer,
        examples,
        steps,
        batch_size,
        learning_rate,
        seed,
        output_dir,
        "prepare_model: warm start",
    )
    return summary


SOURCE_FILE = "source.json"


def describe_base(summary: dict) -> str:
    """prepare_base's summary in words, for the console.

    >>> describe_base({"init": "tiny", "parameters": 505088, "warm_start": {"examples": 378,
    ...                "steps": 300, "first_loss": 2.87, "last_loss": 0.403}})
    'tiny policy, 505,088 parameters, warm start 300 steps on 378 examples (loss 2.870 -> 0.403)'
    >>> describe_base({"init": "tiny", "parameters": 10, "warm_start": {"examples": 3, "steps": 5,
    ...                "first_loss": None, "last_loss": None}})
    'tiny policy, 10 parameters, warm start 5 steps on 3 examples'
    >>> describe_base({"init": "pretrained", "name_or_path": "Qwen/Qwen3-4B"})
    'pretrained policy Qwen/Qwen3-4B'
    >>> describe_base({"init": "local_llm", "parameters": 1705472, "tokenizer_vocab_size": 349,
    ...                "vocab_size": 512, "warm_start": None})
    'local_llm policy, 1,705,472 parameters, byte-level BPE tokenizer of 349 tokens (model vocab_size 512), random init, no warm start'
    """  # noqa: E501 (one-line outputs and tables)
    if summary["init"] == "local_llm":
        return (
            f"local_llm policy, {summary['parameters']:,} parameters, byte-level BPE "
            f"tokenizer of {summary['tokenizer_vocab_size']:,} tokens (model vocab_size "
            f"{summary['vocab_size']:,}), random init, no warm start"
        )
    if summary["init"] != "tiny":
        return f"pretrained policy {summary['name_or_path']}"
    text = f"tiny policy, {summary['parameters']:,} parameters"
    ws = summary.get("warm_start")
    if ws:
        text += f", warm start {ws['steps']} steps on {ws['examples']} examples"
        if ws["first_loss"] is not None and ws["last_loss"] is not None:  # logged every 10 steps
            text += f" (loss {ws['first_loss']:.3f} -> {ws['last_loss']:.3f})"
    return text


def prepare_base(model_params, rows, seed: int, out_dir: str | Path) -> dict:
    """Write the base (reference) policy to out_dir and return a summary of how it was made.

    tiny: build the model and tokenizer locally, warm-start them on the training rows' numbers,
    save them. local_llm: train its tokenizer on the training rows, build the random-init model,
    save them as a hub model's folder; no warm start (it stands in for a hub model, which the
    pipeline takes as it is). pretrained: record where the model lives, its hub commit and its
    weights' sha256 (source.json: pretrained_source) instead of copying gigabytes;
    `policy_path(out_dir)` resolves it for the later stages.
    """
    out_dir = Path(out_dir)
    started = time.perf_counter()
    staging = Path(
        tempfile.mkdtemp(prefix="base.", dir=out_dir.parent if out_dir.parent.exists() else None)
    )
    try:
        if model_params.init == "tiny":
            tokenizer = build_char_tokenizer()
            model = build_tiny_model(tokenizer, model_params.tiny, seed=seed)
            summary = {"init": "tiny", "parameters": sum(p.numel() for p in model.parameters())}
            ws = model_params.warm_start
            if ws.steps > 0:
                with tempfile.TemporaryDirectory() as scratch:
                    summary["warm_start"] = warm_start(
                        model,
                        tokenizer,
                        rows,
                        ws.steps,
                        ws.batch_size,
                        ws.learning_rate,
                        seed,
                        scratch,
                    )
            save_policy(model, tokenizer, staging)
        elif model_params.init == "local_llm":
            from rlvr.policy.local_llm import build_local_llm  # ~4.7 s: only for this init

            model, tokenizer = build_local_llm(rows, model_params.local_llm, seed=seed)
            summary = {
                "init": "local_llm",
                "parameters": sum(p.numel() for p in model.parameters()),
                "tokenizer_vocab_size": len(tokenizer),
                "vocab_size": model.config.vocab_size,
                # model.warm_start is for tiny: a hub model is taken as it is
                "warm_start": None,
            }
            save_policy(model, tokenizer, staging)
        else:
            summary = pretrained_source(model_params.name_or_path, model_params.revision)
            (staging / SOURCE_FILE).write_text(json.dumps(summary, indent=2) + "\n")
        summary["seconds"] = round(time.perf_counter() - started, 1)
        share_with_umask(staging)
        remove_tree(out_dir)
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(staging), out_dir)
        return summary
    finally:
        shutil.rmtree(staging, ignore_errors=True)


WEIGHT_PATTERNS = ("*.safetensors", "*.bin")  # what a hub model's weights are saved as


def _snapshot(name: str, revision: str | None) -> Path:
    """The cached hub snapshot of `name` at `revision` (nothing is downloaded: HF_HUB_OFFLINE)."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name, revision=revision or None, local_files_only=True))
    except Exception as error:  # noqa: BLE001 - not cached, no such revision: one line either way
        raise ParamsError(
            f"model.name_or_path = {name!r} (revision {revision or 'main'!r}): no such local "
            f"folder, and the hub cache has no snapshot of it ({type(error).__name__}): download "
            "it first (huggingface-cli download NAME --revision REV) or name a folder"
        ) from None


def pretrained_source(name_or_path: str, revision: str = "") -> dict:
    """models/base/source.json for a pretrained base: its name, the hub commit it resolved to
    (None for a local folder) and each weight file's sha256, so a model that changed under its
    name changes the base's bytes and reruns every stage that read it."""
    import hashlib

    folder = Path(name_or_path)
    commit = None
    if not folder.is_dir():
        folder = _snapshot(name_or_path, revision)
        commit = folder.name  # the hub cache names each snapshot by its commit
    weights = {}
    for pattern in WEIGHT_PATTERNS:
        for file in sorted(folder.glob(pattern)):
            with open(file, "rb") as handle:
                weights[file.name] = hashlib.file_digest(handle, "sha256").hexdigest()
    return {
        "init": "pretrained",
        "name_or_path": name_or_path,
        "revision": commit,
        "weights_sha256": weights,
    }


def policy_path(base_dir: str | Path) -> str:
    """What from_pretrained should load for a base written by prepare_base: its folder, or for a
    pretrained base the local folder or the very hub snapshot prepare_model recorded."""
    source = Path(base_dir) / SOURCE_FILE
    if source.exists():
        recorded = json.loads(source.read_text())
        if recorded.get("revision"):
            return str(_snapshot(recorded["name_or_path"], recorded["revision"]))
        return recorded["name_or_path"]
    return str(base_dir)
