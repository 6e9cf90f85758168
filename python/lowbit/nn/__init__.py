"""Quantized drop-in ``torch.nn`` modules (PyTorch only; ``import lowbit`` does not import this).

bitsandbytes' ``Linear4bit`` / ``Params4bit`` / ``LinearNF4`` / ``LinearFP4``
and ``Linear8bitLt`` / ``Int8Params`` (same class names, arguments and state
dict layout), the embeddings ``StableEmbedding`` / ``Embedding`` /
``Embedding8bit`` / ``Embedding4bit`` / ``EmbeddingNF4`` / ``EmbeddingFP4``,
DeepSeek's FP8 ``LinearFP8``, BitBLAS' ``Linear``, ``replace_linear`` to
swap a model's ``torch.nn.Linear`` layers, and ``from_pretrained`` to load a
transformers checkpoint quantized by bitsandbytes (or quantize one on load);
``register_peft`` lets peft's LoRA adapters merge into the quantized layers::

    import lowbit.nn
    model = lowbit.nn.replace_linear(model, "nf4", compute_dtype=torch.bfloat16)
    model = lowbit.nn.from_pretrained(AutoModelForCausalLM, "path/to/bnb-4bit-checkpoint")

See docs/nn.md.
"""

from ._4bit import Linear4bit, LinearFP4, LinearNF4, Params4bit
from ._bitblas import Linear
from ._embedding import Embedding, Embedding4bit, Embedding8bit, EmbeddingFP4, EmbeddingNF4, StableEmbedding
from ._fp8 import LinearFP8
from ._hf import from_pretrained
from ._int8 import Int8Params, Linear8bitLt
from ._peft import register_peft
from ._replace import replace_linear

__all__ = [
    "Embedding",
    "Embedding4bit",
    "Embedding8bit",
    "EmbeddingFP4",
    "EmbeddingNF4",
    "Int8Params",
    "Linear",
    "Linear4bit",
    "Linear8bitLt",
    "LinearFP4",
    "LinearFP8",
    "LinearNF4",
    "Params4bit",
    "StableEmbedding",
    "from_pretrained",
    "register_peft",
    "replace_linear",
]
