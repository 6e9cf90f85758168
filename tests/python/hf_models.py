"""The tiny transformers model and the bitsandbytes probe that tests/python/test_nn_hf.py and test_nn_peft.py share."""

from __future__ import annotations

from typing import Any, Optional

import torch

# BitsAndBytesConfig's fields for the checkpoints the tests write
NF4 = dict(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)
FP4 = dict(load_in_4bit=True, bnb_4bit_quant_type="fp4")
INT8 = dict(load_in_8bit=True)
VOCAB = 128


def quiet_transformers() -> None:
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def tiny_llama(path: Any, seed: int = 0, **config: Any) -> str:
    """A random LlamaForCausalLM (hidden 64, 2 layers, vocabulary 128) saved in float32 at ``path``."""
    import transformers

    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64, **config)
    transformers.LlamaForCausalLM(cfg).save_pretrained(path)
    return str(path)


def bnb_reason() -> Optional[str]:
    """None where bitsandbytes runs its 4-bit and 8-bit layers on this CPU, else why not."""
    try:
        import bitsandbytes as bnb
    except Exception as e:  # noqa: BLE001 - any failure to import means no reference
        return f"bitsandbytes is not importable ({type(e).__name__}: {e})"
    try:
        lin = torch.nn.Linear(64, 8)
        for m in (bnb.nn.Linear4bit(64, 8, quant_type="nf4"), bnb.nn.Linear8bitLt(64, 8, has_fp16_weights=False)):
            m.load_state_dict(lin.state_dict())
            m.to("cpu")(torch.randn(2, 64))
    except Exception as e:  # noqa: BLE001
        return f"bitsandbytes {bnb.__version__} does not run its 4-bit / 8-bit layers on this CPU ({e})"
    return None


def quantized_checkpoint(fp32: str, path: Any, config: dict, bnb_ok: bool) -> str:
    """``fp32`` quantized with ``config`` and saved at ``path``: by transformers + bitsandbytes where bitsandbytes
    runs here, else by lowbit (quantized on load, then save_pretrained: bitsandbytes' layout, which
    tests/python/test_nn_bnb.py checks against bitsandbytes' own)."""
    import transformers

    import lowbit.nn

    if bnb_ok:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            fp32, device_map="cpu", quantization_config=transformers.BitsAndBytesConfig(**config))
    else:
        model = lowbit.nn.from_pretrained(transformers.AutoModelForCausalLM, fp32, quantization_config=config)
    model.save_pretrained(path)
    return str(path)
