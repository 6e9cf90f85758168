"""``bitsandbytes.nn`` for ``lowbit.bnb``: lowbit's PyTorch modules under bitsandbytes' names.

This package re-exports :mod:`lowbit.nn` (``Linear4bit``, ``Params4bit``, ``LinearNF4``, ``LinearFP4``,
``Linear8bitLt``, ``Int8Params``, the embeddings ``StableEmbedding``, ``Embedding``, ``Embedding8bit``,
``Embedding4bit``, ``EmbeddingNF4``, ``EmbeddingFP4``, ...), so ``bnb.nn.Linear4bit`` is
``lowbit.nn.Linear4bit``; its submodule :mod:`lowbit.bnb.nn.parametrize` is bitsandbytes'
``bitsandbytes.nn.parametrize`` (4-bit parameters of any module, imported as bitsandbytes' is:
``from lowbit.bnb.nn.parametrize import replace_parameter_4bit``). It is imported on first use of
``lowbit.bnb.nn``: an installation without ``lowbit.nn`` still has the rest of ``lowbit.bnb``.
"""

try:
    from ...nn import *  # noqa: F401,F403  (the re-export is this package's purpose)
    from ...nn import __all__ as __all__  # noqa: PLC0414
except ImportError as _error:  # lowbit.nn is missing: say so where bnb.nn is used, not on `import lowbit.bnb`
    raise ImportError(f"lowbit.bnb.nn re-exports lowbit.nn, which could not be imported ({_error})") from _error
