"""``from_pretrained``: a transformers checkpoint quantized with bitsandbytes' ``quantization_config`` (or a float one,
quantized while it loads) as a model of lowbit.nn modules, without bitsandbytes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import warnings
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple

import torch

from ._4bit import Linear4bit
from ._int8 import Linear8bitLt
from ._replace import _convert, _empty

__all__ = ["from_pretrained"]

_OP = "lowbit.nn.from_pretrained"
# BitsAndBytesConfig's fields, as its to_dict() writes them (a call's dict may hold no others)
_KEYS = frozenset({
    "quant_method", "load_in_4bit", "load_in_8bit", "_load_in_4bit", "_load_in_8bit", "llm_int8_threshold",
    "llm_int8_skip_modules", "llm_int8_enable_fp32_cpu_offload", "llm_int8_has_fp16_weight",
    "bnb_4bit_compute_dtype", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "bnb_4bit_quant_storage"})
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "uint8": torch.uint8,
           "int8": torch.int8, "float64": torch.float64}
_QUANT_SUFFIXES = (".weight.quant_state.bitsandbytes__nf4", ".weight.quant_state.bitsandbytes__fp4", ".SCB")


class _Spec:
    """A bitsandbytes quantization_config, read and checked: what the modules are built with."""

    def __init__(self, bits: int, quant_type: str, double_quant: bool, compute_dtype: torch.dtype,
                 quant_storage: torch.dtype, skip: Optional[List[str]], threshold: float):
        self.bits, self.quant_type, self.double_quant = bits, quant_type, double_quant
        self.compute_dtype, self.quant_storage = compute_dtype, quant_storage
        self.skip, self.threshold = skip, threshold

    @property
    def kind(self) -> str:
        return self.quant_type if self.bits == 4 else "int8"

    def options(self) -> Dict[str, Any]:
        """replace_linear's options for this config (bitsandbytes' fixed blocksize of 64)."""
        return dict(compute_dtype=self.compute_dtype, compress_statistics=self.double_quant,
                    quant_storage=self.quant_storage, blocksize=64, threshold=self.threshold)

    def as_dict(self) -> Dict[str, Any]:
        """The config as transformers writes it into config.json (BitsAndBytesConfig.to_dict())."""
        four = self.bits == 4

        def name(dtype: torch.dtype) -> str:
            return str(dtype).split(".")[1]

        return {
            "quant_method": "bitsandbytes", "_load_in_4bit": four, "_load_in_8bit": not four,
            "llm_int8_threshold": self.threshold, "llm_int8_skip_modules": self.skip,
            "llm_int8_enable_fp32_cpu_offload": False, "llm_int8_has_fp16_weight": False,
            "bnb_4bit_quant_type": self.quant_type, "bnb_4bit_use_double_quant": self.double_quant,
            "bnb_4bit_compute_dtype": name(self.compute_dtype), "bnb_4bit_quant_storage": name(self.quant_storage),
            "load_in_4bit": four, "load_in_8bit": not four,
        }


def _dtype(value: Any, where: str, allowed: Tuple[torch.dtype, ...]) -> torch.dtype:
    """A dtype from a torch.dtype or its name ("bfloat16", "torch.bfloat16")."""
    dtype = value
    if isinstance(value, str):
        dtype = _DTYPES.get(value.removeprefix("torch."))
    if dtype not in allowed:
        names = ", ".join(str(d).split(".")[1] for d in allowed)
        raise ValueError(f"{_OP}: {where} must be one of {names} (got {value!r})")
    return dtype


def _flag(config: Mapping[str, Any], key: str, where: str, default: bool = False) -> bool:
    value = config.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise TypeError(f"{_OP}: {where}[{key!r}] must be true or false (got {value!r})")
    return value


def _spec(config: Any, where: str, from_call: bool) -> _Spec:
    """Reads a bitsandbytes quantization_config: a dict or an object with to_dict() (transformers'
    BitsAndBytesConfig). A call's dict may leave out quant_method and must hold only BitsAndBytesConfig's keys; a
    checkpoint's must name its quant_method, and its other keys are not checked (a newer writer's)."""
    if not isinstance(config, Mapping):
        if not callable(getattr(config, "to_dict", None)):
            raise TypeError(f"{_OP}: {where} must be a dict or a transformers BitsAndBytesConfig "
                            f"(got {type(config).__name__})")
        config = config.to_dict()
    method = config.get("quant_method")
    method = getattr(method, "value", method)  # transformers' QuantizationMethod enum
    if method is None and not from_call:
        raise ValueError(f"{_OP}: {where} has no 'quant_method' (expected 'bitsandbytes')")
    if method is not None and method != "bitsandbytes":
        raise ValueError(f"{_OP}: {where} has quant_method {method!r}; only bitsandbytes' quantization "
                         "('bitsandbytes': load_in_4bit / load_in_8bit) loads into lowbit.nn's modules")
    if from_call:
        unknown = sorted(set(config) - _KEYS)
        if unknown:
            raise ValueError(f"{_OP}: {where} has unknown keys {unknown}; BitsAndBytesConfig's are "
                             f"{sorted(k for k in _KEYS if not k.startswith('_'))}")
    four = _flag(config, "load_in_4bit", where) or _flag(config, "_load_in_4bit", where)
    eight = _flag(config, "load_in_8bit", where) or _flag(config, "_load_in_8bit", where)
    if four == eight:
        state = "both" if four else "neither"
        raise ValueError(f"{_OP}: {where} must set exactly one of 'load_in_4bit' and 'load_in_8bit' to true "
                         f"(got {state})")
    quant_type = config.get("bnb_4bit_quant_type") or "fp4"
    if four and quant_type not in ("nf4", "fp4"):
        raise ValueError(f"{_OP}: {where}['bnb_4bit_quant_type'] must be 'nf4' or 'fp4' (got {quant_type!r})")
    compute = config.get("bnb_4bit_compute_dtype")
    compute = torch.float32 if compute is None else _dtype(compute, f"{where}['bnb_4bit_compute_dtype']",
                                                            (torch.float32, torch.float16, torch.bfloat16))
    storage = config.get("bnb_4bit_quant_storage")
    storage = torch.uint8 if storage is None else _dtype(storage, f"{where}['bnb_4bit_quant_storage']",
                                                          tuple(_DTYPES.values()))
    skip = config.get("llm_int8_skip_modules")
    if skip is not None:
        if isinstance(skip, str) or not all(isinstance(s, str) for s in skip):
            raise TypeError(f"{_OP}: {where}['llm_int8_skip_modules'] must be a list of module names "
                            f"(got {skip!r})")
        skip = list(skip)
    threshold = config.get("llm_int8_threshold", 6.0)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not threshold >= 0:
        raise ValueError(f"{_OP}: {where}['llm_int8_threshold'] must be a number >= 0 (got {threshold!r})")
    if eight and _flag(config, "llm_int8_has_fp16_weight", where):
        raise NotImplementedError(f"{_OP}: {where}['llm_int8_has_fp16_weight'] true (float weights trained "
                                  "through LLM.int8) is not supported; lowbit's Linear8bitLt trains no weight")
    return _Spec(4 if four else 8, quant_type, _flag(config, "bnb_4bit_use_double_quant", where), compute, storage,
                 skip, float(threshold))


# ------------------------------------------------------------------ checkpoint files


class _Checkpoint:
    """The tensors of a safetensors checkpoint (one file or shards with an index), read on demand."""

    def __init__(self, path: str):
        try:
            from safetensors import safe_open
        except ImportError as e:
            raise ImportError(f"{_OP} reads safetensors checkpoints: pip install safetensors") from e
        single = os.path.join(path, "model.safetensors")
        index = single + ".index.json"
        if os.path.isfile(single):
            files = [single]
        elif os.path.isfile(index):
            with open(index) as f:
                weight_map = json.load(f).get("weight_map")
            if not isinstance(weight_map, dict):
                raise ValueError(f"{_OP}: {index} has no 'weight_map' (the tensors' shard files)")
            files = [os.path.join(path, name) for name in sorted(set(weight_map.values()))]
        else:
            raise FileNotFoundError(f"{_OP}: {path} holds neither model.safetensors nor model.safetensors.index.json "
                                    "(the safetensors checkpoint that save_pretrained writes)")
        self._handle: Dict[str, Any] = {}  # tensor name -> the open file holding it
        for file in files:
            if not os.path.isfile(file):
                raise FileNotFoundError(f"{_OP}: the checkpoint's index names {file}, which does not exist")
            handle = safe_open(file, framework="pt", device="cpu")
            for key in handle.keys():
                self._handle[key] = handle

    def keys(self) -> List[str]:
        return list(self._handle)

    def get(self, key: str) -> torch.Tensor:
        return self._handle[key].get_tensor(key)


# ------------------------------------------------------------------ the model


@contextlib.contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Builds modules with their parameters on the meta device and their buffers where they are made: a model's
    non-persistent buffers (rotary tables) are computed by its constructor and are in no checkpoint. It replaces
    ``torch.nn.Module.register_parameter`` while the model is built (as accelerate's ``init_empty_weights`` does), so
    modules built on other threads meanwhile get meta parameters too."""
    register = torch.nn.Module.register_parameter

    def on_meta(module: torch.nn.Module, name: str, param: Optional[torch.nn.Parameter]) -> None:
        register(module, name, param)
        if param is not None and param.device.type != "meta":
            fields = dict(param.__dict__)
            fields["requires_grad"] = param.requires_grad
            module._parameters[name] = type(param)(param.to("meta"), **fields)

    torch.nn.Module.register_parameter = on_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register  # type: ignore[method-assign]


def _build(model_class: Any, path: str, config_kwargs: Dict[str, Any]) -> Any:
    """The model of ``path``'s config.json, its parameters on the meta device."""
    try:
        import transformers
    except ImportError as e:
        raise ImportError(f"{_OP} builds transformers models: pip install transformers") from e
    is_model = isinstance(model_class, type) and issubclass(model_class, transformers.PreTrainedModel)
    if not is_model and not callable(getattr(model_class, "from_config", None)):
        raise TypeError(f"{_OP}: model_class must be a transformers model class (LlamaForCausalLM) or auto class "
                        f"(AutoModelForCausalLM) (got {model_class!r})")
    config_class = model_class.config_class if is_model else transformers.AutoConfig
    config, unused = config_class.from_pretrained(path, return_unused_kwargs=True, **config_kwargs)
    if unused:
        raise TypeError(f"{_OP}: unknown keyword arguments {sorted(unused)} (neither from_pretrained's nor "
                        f"{type(config).__name__}'s)")
    with _parameters_on_meta():
        model = model_class(config) if is_model else model_class.from_config(config)
    return model


def _matches(name: str, patterns: List[str]) -> bool:
    """transformers' rule for modules_to_not_convert: a pattern matches from the start up to a module boundary (as a
    regex), or as a suffix of the module's name."""
    boundary = r"(?:(?<=\.)|(?=\.|$))"
    return any(re.match(rf"(?:{p}){boundary}", name) or name.endswith(p) for p in patterns)


def _not_converted(model: torch.nn.Module, skip: Optional[List[str]]) -> List[str]:
    """The modules transformers leaves in float: ``llm_int8_skip_modules`` when given, else the output embeddings,
    the tied weights' modules and the last parameter's module; and the model's ``_keep_in_fp32_modules``."""
    names: List[str] = []
    if skip is None:
        tied = getattr(model, "all_tied_weights_keys", None) or {}
        if isinstance(tied, Mapping):
            names += [k.removesuffix(".weight") for k in (*tied.keys(), *tied.values()) if isinstance(k, str)]
        params = list(model.named_parameters())
        if params:
            names.append(params[-1][0].removesuffix(".weight"))
        out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        names += [n for n, m in model.named_modules() if out is not None and m is out]
    else:
        names += skip
    for attr in ("_keep_in_fp32_modules", "_keep_in_fp32_modules_strict"):
        names += list(getattr(model, attr, None) or ())
    return sorted(set(names))


def _targets(model: torch.nn.Module, spec: _Spec) -> List[Tuple[str, torch.nn.Linear, bool]]:
    """The layers to quantize, as transformers picks them: (name, the layer or a meta Linear of its shape, whether the
    float checkpoint holds its weight transposed). transformers' Conv1D (GPT-2) keeps its weight as [in, out] and is
    quantized, and stored, as the Linear [out, in] it computes."""
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:
        Conv1D = None
    skip = _not_converted(model, spec.skip)
    found = []
    for name, m in model.named_modules():
        if not name or _matches(name, skip):
            continue
        if type(m) is torch.nn.Linear:
            found.append((name, m, False))
        elif Conv1D is not None and isinstance(m, Conv1D):
            k, n = m.weight.shape
            found.append((name, torch.nn.Linear(k, n, bias=m.bias is not None, device="meta"), True))
    return found


def _load(model: torch.nn.Module, state: Dict[str, torch.Tensor], path: str) -> None:
    """Assigns the checkpoint's tensors; any parameter or persistent buffer left on meta (after tying) is an error
    naming it; checkpoint tensors the model has no place for are a warning, as in transformers."""
    result = model.load_state_dict(state, strict=False, assign=True)
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    missing = [n for n, t in model.state_dict(keep_vars=True).items() if t.device.type == "meta"]
    if missing:
        shown = ", ".join(missing[:8]) + (f", ... ({len(missing)} in all)" if len(missing) > 8 else "")
        raise ValueError(f"{_OP}: the checkpoint in {path} has no tensor for {shown}")
    if result.unexpected_keys:
        shown = ", ".join(result.unexpected_keys[:8])
        warnings.warn(f"{_OP}: the model has no place for {len(result.unexpected_keys)} tensors of the checkpoint "
                      f"in {path} ({shown}); they were not loaded", stacklevel=3)


def _check_prequantized(targets: List[Tuple[str, torch.nn.Linear, bool]], keys: set, spec: _Spec, path: str) -> None:
    """Each layer to swap holds its quantized tensors in the checkpoint; else an error naming those missing."""
    missing = []
    for name, _, _ in targets:
        if spec.bits == 4:
            kinds = [f"{name}.weight.quant_state.bitsandbytes__{t}" for t in ("nf4", "fp4")]
            if not any(k in keys for k in kinds):
                missing.append(f"{name}.weight.quant_state.bitsandbytes__{spec.quant_type}")
            missing += [k for k in (f"{name}.weight", f"{name}.weight.absmax", f"{name}.weight.quant_map")
                        if k not in keys]
        else:
            missing += [k for k in (f"{name}.weight", f"{name}.SCB") if k not in keys]
    if missing:
        shown = ", ".join(missing[:8]) + (f", ... ({len(missing)} in all)" if len(missing) > 8 else "")
        what = "4-bit" if spec.bits == 4 else "int8"
        raise ValueError(f"{_OP}: the checkpoint in {path} is {what} (its quantization_config) but has no tensor "
                         f"{shown}")


def _set(model: torch.nn.Module, name: str, module: torch.nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


def from_pretrained(
    model_class: Any,
    path: "str | os.PathLike[str]",
    *,
    quantization_config: Any = None,
    dtype: Optional[torch.dtype] = None,
    device: Any = "cpu",
    compute_dtype: Optional[torch.dtype] = None,
    **config_kwargs: Any,
) -> Any:
    """A transformers model from a local checkpoint directory, its quantized layers lowbit.nn modules.

    ``model_class``: a transformers model class (``LlamaForCausalLM``) or auto
    class (``AutoModelForCausalLM``). ``path``: a directory written by
    ``save_pretrained`` (config.json and model.safetensors, or shards with
    model.safetensors.index.json). When its config.json has bitsandbytes'
    ``quantization_config`` (``load_in_4bit`` or ``load_in_8bit``), the
    layers transformers would swap become :class:`Linear4bit` /
    :class:`Linear8bitLt` and take the checkpoint's tensors as they are.
    Otherwise ``quantization_config`` (a ``transformers.BitsAndBytesConfig``
    or a dict of its fields) quantizes the float checkpoint while it loads,
    one layer at a time on ``device``; given for a quantized checkpoint, it is
    ignored with a warning (transformers does the same). ``dtype``: the
    dtype of the float parameters (embeddings, norms, biases, layers left
    unquantized), and of the float weights before they are quantized on
    load; None keeps the checkpoint's. ``device``: where the model goes.
    ``compute_dtype`` replaces ``bnb_4bit_compute_dtype``. Other keywords
    update the model's config, as in transformers. bitsandbytes is never
    imported. Returns the model in eval mode, with
    ``config.quantization_config`` describing its layers (so
    ``save_pretrained`` writes a checkpoint that loads here and in
    transformers with bitsandbytes).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{_OP}: path must be a checkpoint directory (got {type(path).__name__})")
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{_OP}: {path} is not a directory (download a hub checkpoint first, e.g. with "
                                "huggingface_hub.snapshot_download)")
    if dtype is not None and dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"{_OP}: dtype must be None, torch.float32, torch.float16 or torch.bfloat16 (got {dtype!r})")
    if compute_dtype is not None and compute_dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"{_OP}: compute_dtype must be None, torch.float32, torch.float16 or torch.bfloat16 "
                        f"(got {compute_dtype!r})")
    device = torch.device(device)
    model = _build(model_class, path, config_kwargs)
    stored = getattr(model.config, "quantization_config", None)
    prequantized = stored is not None
    if prequantized:
        spec = _spec(stored, f"the quantization_config of {os.path.join(path, 'config.json')}", from_call=False)
        if quantization_config is not None:
            warnings.warn(f"{_OP}: the checkpoint in {path} is already quantized; its own quantization_config is "
                          "used and the one passed is ignored (compute_dtype= sets the 4-bit compute dtype)",
                          stacklevel=2)
    elif quantization_config is None:
        raise ValueError(f"{_OP}: the config.json in {path} has no quantization_config (a float checkpoint): pass "
                         "quantization_config= (a BitsAndBytesConfig or a dict of its fields) to quantize it on load")
    else:
        spec = _spec(quantization_config, "quantization_config", from_call=True)
    if compute_dtype is not None:
        spec.compute_dtype = compute_dtype

    checkpoint = _Checkpoint(path)
    keys = set(checkpoint.keys())
    targets = _targets(model, spec)
    with torch.no_grad():
        if prequantized:
            _check_prequantized(targets, keys, spec, path)
            for name, linear, _ in targets:
                _set(model, name, _empty(linear, spec.kind, **spec.options()))
            _load(model, {k: checkpoint.get(k) for k in keys}, path)
        else:
            stray = sorted(k for k in keys if k.endswith(_QUANT_SUFFIXES))
            if stray:
                raise ValueError(f"{_OP}: the checkpoint in {path} holds quantized tensors ({stray[0]}) but its "
                                 "config.json has no quantization_config to read them with")
            taken = set()
            for name, linear, transposed in targets:
                wanted = [f"{name}.weight"] + ([f"{name}.bias"] if linear.bias is not None else [])
                absent = [k for k in wanted if k not in keys]
                if absent:
                    raise ValueError(f"{_OP}: the checkpoint in {path} has no tensor for {', '.join(absent)}")
                tensors = [checkpoint.get(k) for k in wanted]
                if transposed:
                    tensors[0] = tensors[0].t().contiguous()
                if dtype is not None:  # transformers converts the weights before quantizing them
                    tensors = [t.to(dtype) if t.is_floating_point() else t for t in tensors]
                linear.weight = torch.nn.Parameter(tensors[0], requires_grad=False)
                if linear.bias is not None:
                    linear.bias = torch.nn.Parameter(tensors[1], requires_grad=False)
                _set(model, name, _convert(linear, spec.kind, device, **spec.options()))
                taken.update(wanted)
            _load(model, {k: checkpoint.get(k) for k in keys - taken}, path)
            model.config.quantization_config = spec.as_dict()
        if spec.bits == 4 and isinstance(model.config.quantization_config, dict):
            model.config.quantization_config["bnb_4bit_compute_dtype"] = str(spec.compute_dtype).split(".")[1]
        if dtype is not None:
            for module in model.modules():
                quantized = isinstance(module, (Linear4bit, Linear8bitLt))
                for pname, param in module.named_parameters(recurse=False):
                    if param.is_floating_point() and not (quantized and pname == "weight"):
                        param.data = param.data.to(dtype)
    model = model.to(device)
    _generation_config(model, path)
    return model.eval()


def _generation_config(model: Any, path: str) -> None:
    """The checkpoint's generation_config.json, as transformers' from_pretrained reads it."""
    if os.path.isfile(os.path.join(path, "generation_config.json")) and hasattr(model, "generation_config"):
        from transformers import GenerationConfig

        model.generation_config = GenerationConfig.from_pretrained(path)
