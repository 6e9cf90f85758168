"""The optimizer base classes of ``lowbit.optim``: bitsandbytes' ``Optimizer8bit``,
``Optimizer1State`` and ``Optimizer2State`` and its ``GlobalOptimManager``, over
lowbit's update ops (docs/optim.md).

The states are the ones bitsandbytes keeps, under its keys and shapes, so a
``state_dict()`` moves between the two libraries in either direction:
``step``, ``state1``/``state2`` (float32, or uint8 codes of ``qmap1``/``qmap2``),
``absmax1``/``absmax2`` (blockwise), ``max1``/``new_max1``/``max2``/``new_max2``
(tensor-wise), ``gnorm_vec`` (percentile clipping) and ``unorm_vec`` (LAMB/LARS).
"""

from __future__ import annotations

import math
import warnings
from collections import abc as container_abcs
from collections import defaultdict
from copy import deepcopy
from itertools import chain
from typing import Any, Dict, Optional

import torch

from .. import functional as F

try:  # parameters sharded by FSDP2 (fully_shard) are DTensors
    from torch.distributed.tensor import DTensor, Shard
except ImportError:  # a torch without torch.distributed
    DTensor = Shard = None
_DTENSOR = DTensor if DTensor is not None else ()  # isinstance's second argument: () matches nothing
_PLAIN = frozenset((torch.Tensor, torch.nn.Parameter))  # never DTensors: a test cheaper than isinstance's

_BLOCKSIZE = 256  # the blockwise states' block, as optimizer_update_8bit_blockwise takes it
_F32 = torch.float32
_contiguous = torch.Tensor.is_contiguous  # unbound: no attribute lookup per call
_STATES = ("state1", "state2")


def _is_dtensor(t) -> bool:
    return type(t) not in _PLAIN and isinstance(t, _DTENSOR)


def _local(t):
    """The tensor the kernels update: a DTensor's local shard (a view: updates reach the DTensor), else t."""
    return t.to_local() if _is_dtensor(t) else t


def _sharded_sum(value: torch.Tensor, p) -> None:
    """Sums ``value`` in place over the mesh dimensions along which ``p`` is sharded (a norm of the
    whole parameter from its shards' parts); nothing for a plain tensor."""
    if not _is_dtensor(p):
        return
    import torch.distributed as dist

    for dim, placement in enumerate(p.placements):
        if isinstance(placement, Shard):
            dist.all_reduce(value, group=p.device_mesh.get_group(dim))


def _state_dtensor(local: torch.Tensor, p, leading: tuple):
    """A state of p's local shard as a DTensor laid out like p (``leading`` dimensions before p's)."""
    placements = tuple(Shard(pl.dim + len(leading)) if isinstance(pl, Shard) else pl for pl in p.placements)
    shape = (*leading, *p.shape)
    stride = tuple(math.prod(shape[i + 1:]) for i in range(len(shape)))
    return DTensor.from_local(local, p.device_mesh, placements, run_check=False, shape=torch.Size(shape),
                              stride=stride)


class GlobalOptimManager:
    """Per-parameter overrides of the optimizer's configuration (bitsandbytes' ``GlobalOptimManager``).

    Register the parameters while they are still the model's (``register_parameters``), then
    ``override_config(param, "optim_bits", 32)`` keeps that parameter's states in 32 bits, say; any key
    of the configuration (``betas``, ``lr``, ``eps``, ``weight_decay``, ``optim_bits``, ``min_8bit_size``,
    ``percentile_clipping``, ``block_wise``, ``max_unorm``, ``skip_zeros``) can be overridden.
    """

    _instance: Optional["GlobalOptimManager"] = None

    def __init__(self):
        raise RuntimeError("GlobalOptimManager: call GlobalOptimManager.get_instance()")

    def initialize(self) -> None:
        self.pid2config: Dict[int, Dict[str, Any]] = {}
        self.index2config: Dict[tuple, Dict[str, Any]] = {}
        self.optimizer = None
        self.uses_config_override = False
        self.module_weight_config_triple: list = []

    @classmethod
    def get_instance(cls) -> "GlobalOptimManager":
        if cls._instance is None:
            cls._instance = cls.__new__(cls)
            cls._instance.initialize()
        return cls._instance

    def register_parameters(self, params) -> None:
        groups = list(params)
        if groups and not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for gindex, group in enumerate(groups):
            for pindex, p in enumerate(group["params"]):
                if id(p) in self.pid2config:
                    self.index2config[(gindex, pindex)] = self.pid2config[id(p)]

    def override_config(self, parameters, key=None, value=None, key_value_dict=None) -> None:
        """Overrides ``key`` with ``value`` (or every item of ``key_value_dict``) for ``parameters``."""
        self.uses_config_override = True
        if isinstance(parameters, torch.Tensor):
            parameters = [parameters]
        if key is not None and value is not None:
            if key_value_dict is not None:
                raise ValueError("override_config: give key and value, or key_value_dict, not both")
            key_value_dict = {key: value}
        if key_value_dict is None:
            return
        for p in parameters:
            self.pid2config.setdefault(id(p), {}).update(key_value_dict)

    def register_module_override(self, module, param_name, config) -> None:
        """Overrides ``config`` for ``module.<param_name>`` once the optimizer first steps."""
        self.module_weight_config_triple.append((module, param_name, config))


class _Args:
    """The configuration keys that are the optimizer's rather than a parameter group's."""

    def __init__(self, values: Dict[str, Any]):
        self.__dict__.update(values)


def _check_hyperparameters(lr, eps, betas, weight_decay) -> None:
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr} (must be >= 0)")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps} (must be >= 0)")
    for i, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {beta} (must be in [0, 1))")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay} (must be >= 0)")


def _parse_betas(betas):
    if isinstance(betas, str):  # '(0.9, 0.999)', as some launchers pass them
        betas = [float(b) for b in betas.replace("(", "").replace(")", "").split(",") if b.strip()]
    return tuple(float(b) for b in betas)


class Optimizer8bit(torch.optim.Optimizer):
    """The base of every ``lowbit.optim`` optimizer: state creation, paging, overrides and
    ``state_dict`` handling. Subclasses give ``init_state`` and ``update_step``."""

    # bitsandbytes' key: quantization states ride in a nested dict that FSDP's gathering leaves alone.
    _FSDP_WRAPPED_QUANT_STATE_KEY = "__bnb_optimizer_quant_state__"
    non_castable_tensor_keys = frozenset({"qmap1", "qmap2", "max1", "max2", "new_max1", "new_max2", "state1", "state2",
                                          "gnorm_vec", "absmax1", "absmax2", "unorm_vec"})

    def __init__(self, params, defaults, optim_bits=32, is_paged=False):
        super().__init__(params, defaults)
        self.initialized = False
        self.name2qmap: Dict[str, torch.Tensor] = {}
        self.is_paged = bool(is_paged)
        self.page_mng = F.GlobalPageManager.get_instance()
        self.mng = GlobalOptimManager.get_instance()
        if optim_bits == 8:
            self.fill_qmap()

    def fill_qmap(self) -> None:
        self.name2qmap["dynamic"] = torch.from_numpy(F.create_dynamic_map(signed=True))
        self.name2qmap["udynamic"] = torch.from_numpy(F.create_dynamic_map(signed=False))

    def _qmap(self, name: str, device) -> torch.Tensor:
        if name not in self.name2qmap:
            self.fill_qmap()
        self.name2qmap[name] = self.name2qmap[name].to(device)
        return self.name2qmap[name]

    # ----------------------------------------------------------- state_dict

    def state_dict(self):
        """The state as ``torch.optim.Optimizer`` gives it, with the quantization tensors of each
        parameter moved under ``__bnb_optimizer_quant_state__``, as bitsandbytes writes them.

        The states of a sharded parameter (a DTensor, as FSDP2 makes them) are DTensors laid out like it,
        so that ``torch.distributed.checkpoint`` saves them sharded and loads them at another world size:
        float32, the 8-bit ones dequantized (their blocks are the local shard's, which another sharding
        does not share; ``load_state_dict`` quantizes them again, to the same codes where the shards are
        the same), without ``absmax1``/``absmax2``."""
        state_dict = super().state_dict()
        state_dict["state"] = {k: dict(v) if isinstance(v, dict) else v for k, v in state_dict["state"].items()}
        params = list(chain.from_iterable(g["params"] for g in self.param_groups))
        for index, param_state in state_dict["state"].items():
            if isinstance(index, int) and index < len(params) and _is_dtensor(params[index]):
                self._export_sharded(params[index], param_state)
        for param_state in state_dict["state"].values():
            if not isinstance(param_state, dict):
                continue
            quant = {k: param_state.pop(k) for k in list(param_state) if k in self.non_castable_tensor_keys}
            if quant:
                param_state[self._FSDP_WRAPPED_QUANT_STATE_KEY] = quant
        return state_dict

    def _export_sharded(self, p, param_state: dict) -> None:
        """A sharded parameter's states in state_dict's form (see ``state_dict``), in place."""
        for key in _STATES:
            value = param_state.get(key)
            if not isinstance(value, torch.Tensor) or _is_dtensor(value):
                continue
            leading = tuple(value.shape[:value.dim() - _local(p).dim()])
            if value.dtype == torch.uint8:
                absmax = param_state.pop("absmax" + key[-1], None)
                if absmax is None:
                    raise NotImplementedError(f"{type(self).__name__}.state_dict: tensor-wise 8-bit states of a "
                                              "sharded parameter (block_wise=False) are not supported")
                rows = value.reshape(-1, _local(p).numel())
                value = _dequantize(rows, absmax.reshape(rows.shape[0], -1), param_state["qmap" + key[-1]]).reshape(
                    value.shape)
            param_state[key] = _state_dtensor(value, p, leading)

    def _import_sharded(self, p, param_state: dict, gindex: int, pindex: int) -> None:
        """Loaded states back to the kernels' form: a DTensor's local shard (the whole tensor where the
        parameter is not sharded), float32 states quantized where this optimizer keeps the parameter's
        states in 8 bits."""
        local = _local(p)
        for key in _STATES:
            value = param_state.get(key)
            if not isinstance(value, torch.Tensor):
                continue
            if _is_dtensor(value):
                value = value.to_local() if _is_dtensor(p) else value.full_tensor()
            value = value.to(local.device)
            config = self.get_config(gindex, pindex, self.param_groups[gindex])
            if value.dtype == torch.float32 and _state_dtype(config, p) == torch.uint8:
                if not config["block_wise"]:
                    raise NotImplementedError(f"{type(self).__name__}.load_state_dict: float32 states for tensor-wise "
                                              "8-bit ones (block_wise=False) are not supported")
                qmap = self._qmap("dynamic" if key == "state1" else "udynamic", local.device)
                codes, absmax = _requantize(value.reshape(-1, local.numel()), qmap)
                param_state[key] = codes.reshape(value.shape)
                param_state["absmax" + key[-1]] = absmax.reshape(*value.shape[:value.dim() - local.dim()], -1)
                param_state["qmap" + key[-1]] = qmap
            else:
                param_state[key] = value

    def load_state_dict(self, state_dict, move_to_device=True):
        """Loads a state saved by ``state_dict()`` here or by bitsandbytes' optimizer of the same rule.

        Floating-point states other than the quantization ones take the parameter's dtype (as
        ``torch.optim`` does); the quantization states keep theirs and move to the parameter's device.
        States given as DTensors (a sharded parameter's, as ``torch.distributed.checkpoint`` loads them
        for this optimizer's sharding) become their local shards, and float32 states of a parameter this
        optimizer keeps in 8 bits are quantized in blocks of the local shard.
        """
        state_dict = deepcopy(state_dict)
        for param_state in state_dict["state"].values():
            if isinstance(param_state, dict) and self._FSDP_WRAPPED_QUANT_STATE_KEY in param_state:
                param_state.update(param_state.pop(self._FSDP_WRAPPED_QUANT_STATE_KEY))

        groups = self.param_groups
        saved_groups = state_dict["param_groups"]
        if len(groups) != len(saved_groups):
            raise ValueError(f"load_state_dict: the state has {len(saved_groups)} parameter groups, "
                             f"the optimizer {len(groups)}")
        for i, (g, s) in enumerate(zip(groups, saved_groups)):
            if len(g["params"]) != len(s["params"]):
                raise ValueError(f"load_state_dict: parameter group {i} has {len(s['params'])} parameters in the "
                                 f"state, {len(g['params'])} in the optimizer")
        id_map = dict(zip(chain.from_iterable(g["params"] for g in saved_groups),
                          chain.from_iterable(g["params"] for g in groups)))

        def cast(param, value):
            if isinstance(value, torch.Tensor):
                if param.is_floating_point() and value.dtype != torch.uint8:
                    value = value.to(param.dtype)
                return value
            if isinstance(value, dict):
                for k, v in value.items():
                    if k in self.non_castable_tensor_keys:
                        if move_to_device and isinstance(v, torch.Tensor):
                            value[k] = v.to(param.device)
                    else:
                        value[k] = cast(param, v)
                return value
            if isinstance(value, container_abcs.Iterable) and not isinstance(value, (str, bytes)):
                return type(value)(cast(param, v) for v in value)
            return value

        state = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k in id_map:
                state[id_map[k]] = cast(id_map[k], v)
            else:
                state[k] = v
        param_groups = []
        for g, s in zip(groups, saved_groups):
            s["params"] = g["params"]
            param_groups.append(s)
        self.__setstate__({"state": state, "param_groups": param_groups})
        for gindex, group in enumerate(self.param_groups):
            for pindex, p in enumerate(group["params"]):
                if isinstance(self.state.get(p), dict):
                    self._import_sharded(p, self.state[p], gindex, pindex)
        self._share_maps()

    def _share_maps(self) -> None:
        """Makes equal code maps one tensor again (a loaded state has a copy per parameter), so that the
        parameters' updates batch; compared once, at load."""
        shared: list = []
        for st in self.state.values():
            if not isinstance(st, dict):
                continue
            for key in ("qmap1", "qmap2"):
                m = st.get(key)
                if not isinstance(m, torch.Tensor):
                    continue
                same = next((u for u in shared if u.device == m.device and u.shape == m.shape and torch.equal(u, m)),
                            None)
                if same is None:
                    shared.append(m)
                else:
                    st[key] = same

    # --------------------------------------------------------------- stepping

    def to_gpu(self) -> None:
        """Moves states created on another device (a checkpoint loaded to the CPU) to their parameter's."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.device.type == "cpu" or p not in self.state:
                    continue
                for k, v in self.state[p].items():
                    if isinstance(v, torch.Tensor) and not getattr(v, "is_paged", False):
                        self.state[p][k] = v.to(p.device)

    def check_overrides(self) -> None:
        for module, attr, config in self.mng.module_weight_config_triple:
            target = getattr(module, attr)
            for gindex, group in enumerate(self.param_groups):
                for pindex, p in enumerate(group["params"]):
                    if p is target:
                        # by the parameter, which the override's module keeps alive: a position in this
                        # optimizer's groups would also match another optimizer's parameter there
                        self.mng.pid2config[id(p)] = config

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter that has a gradient. Parameters that share a rule, a step count, the
        constants, a dtype and a device go to the GPU as one multi-tensor update; nothing here waits for the
        GPU (percentile clipping's scales stay on the device)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not self.initialized:
            self.check_overrides()
            self.to_gpu()
            self.initialized = True
        prefetch = self.is_paged or type(self).prefetch_state is not Optimizer8bit.prefetch_state
        todo, configs, states = [], [], []
        for gindex, group in enumerate(self.param_groups):
            shared = self._shared_config(group)
            for pindex, p in enumerate(group["params"]):
                grad = p.grad
                if grad is None:
                    continue
                if _is_dtensor(p) and not (_is_dtensor(grad) and grad.placements == p.placements):
                    raise ValueError(f"{type(self).__name__}.step: a sharded parameter's gradient must be sharded as "
                                     f"it is ({p.placements}); got "
                                     f"{grad.placements if _is_dtensor(grad) else 'a plain tensor'}")
                state = self.state[p]
                if len(state) == 0:
                    self.init_state(group, p, gindex, pindex)
                if prefetch:
                    self.prefetch_state(p)
                todo.append((group, p, gindex, pindex))
                configs.append(shared if shared is not None else self.get_config(gindex, pindex, group))
                states.append(state)
        self._update_all(todo, configs, states)
        return loss

    def _update_all(self, todo, configs, states) -> None:
        """This step's updates of the parameters in ``todo`` (with their configurations and states, in order)."""
        for member in todo:
            self.update_step(*member)

    def _group_config(self, group) -> Dict[str, Any]:
        """The configuration of a parameter of ``group`` without overrides."""
        config = {
            "betas": group["betas"],
            "eps": group["eps"],
            "weight_decay": group["weight_decay"],
            "lr": group["lr"],
            "alpha": group.get("alpha", 0.0),
            "t_alpha": group.get("t_alpha"),
            "t_beta3": group.get("t_beta3"),
        }
        for key in ("optim_bits", "min_8bit_size", "percentile_clipping", "block_wise", "max_unorm", "skip_zeros"):
            config[key] = getattr(self.args, key)
        return config

    def _shared_config(self, group) -> Optional[Dict[str, Any]]:
        """The configuration every parameter of ``group`` has this step (built once: group values change between
        steps), or None where a parameter may have its own (overrides, a subclass's get_config)."""
        if self.mng.index2config or self.mng.pid2config or type(self).get_config is not Optimizer8bit.get_config:
            return None
        return self._group_config(group)

    def get_config(self, gindex, pindex, group) -> Dict[str, Any]:
        config = self._group_config(group)
        config.update(self.mng.index2config.get((gindex, pindex), {}))
        p = self.param_groups[gindex]["params"][pindex]
        config.update(self.mng.pid2config.get(id(p), {}))
        return config

    def init_state(self, group, p, gindex, pindex):
        raise NotImplementedError(f"{type(self).__name__} must define init_state")

    def update_step(self, group, p, gindex, pindex):
        raise NotImplementedError(f"{type(self).__name__} must define update_step")

    def get_state_buffer(self, p, dtype=torch.float32, leading=()):
        """A zeroed state for ``p`` (``leading`` dimensions before ``p``'s shape): in managed memory when
        the optimizer is paged and the state is large, else on ``p``'s device."""
        shape = (*leading, *p.shape)
        if self.is_paged and p.device.type == "cpu":
            if not getattr(self, "_cpu_paged_warned", False):
                warnings.warn("Paged optimizer states need a CUDA parameter: states of CPU parameters are not paged",
                              stacklevel=3)
                self._cpu_paged_warned = True
        elif self.is_paged and p.numel() >= 1e5:  # about 1 MB and more: smaller ones gain nothing from paging
            buf = F.get_paged(*shape, dtype=dtype, device=p.device)
            buf.zero_()
            self.page_mng.paged_tensors.append(buf)
            return buf
        return torch.zeros(shape, dtype=dtype, device=p.device)

    def prefetch_state(self, p) -> None:
        if not self.is_paged:
            return
        for key in ("state1", "state2"):
            t = self.state[p].get(key)
            if t is not None and getattr(t, "is_paged", False):
                F.prefetch_tensor(t)


def _state_dtype(config, p) -> torch.dtype:
    bits = config["optim_bits"]
    if bits not in (8, 32):
        raise NotImplementedError(f"optim_bits must be 8 or 32 (got {bits})")
    return torch.uint8 if bits == 8 and p.numel() >= config["min_8bit_size"] else torch.float32


def _blocks(n: int) -> int:
    return (n + _BLOCKSIZE - 1) // _BLOCKSIZE


def _dequantize(codes: torch.Tensor, absmax: torch.Tensor, qmap: torch.Tensor) -> torch.Tensor:
    """Blockwise 8-bit states as float32: rows of codes, each row's blocks of 256 scaled by absmax (the
    kernels' ``code[c] * absmax``; the inverse of ``_requantize``)."""
    scale = absmax.repeat_interleave(_BLOCKSIZE, dim=-1)[:, :codes.shape[1]]
    return qmap.to(codes.device, torch.float32)[codes.long()] * scale


def _requantize(rows: torch.Tensor, qmap: torch.Tensor):
    """Blockwise codes and absmax of dequantized 8-bit states (rows of float32, blocks of 256 of each
    row), so that decoding them gives the values back: a block's absmax is its largest magnitude over
    the map's extreme on that side (a signed map's most negative code is above -1, so a block whose
    largest value was negative decoded to less than its absmax), and each value takes its nearest code."""
    n = rows.shape[1]
    pad = _blocks(n) * _BLOCKSIZE - n
    blocks = torch.nn.functional.pad(rows.float(), (0, pad)).reshape(rows.shape[0], -1, _BLOCKSIZE)
    where = blocks.abs().argmax(dim=-1, keepdim=True)
    peak = blocks.gather(-1, where).squeeze(-1)
    qmap = qmap.to(rows.device, torch.float32)
    absmax = torch.where(peak < 0, -peak / -qmap.min(), peak / qmap.max())
    scaled = blocks / torch.where(absmax > 0, absmax, 1.0).unsqueeze(-1)
    codes = torch.bucketize(scaled, (qmap[1:] + qmap[:-1]) / 2).to(torch.uint8)  # the nearest code
    codes = codes.reshape(rows.shape[0], -1)[:, :n]
    return codes, absmax


def _clip_scale(p, gnorm_vec: torch.Tensor, step: int, percentile: int) -> torch.Tensor:
    """Percentile clipping's step on the device: this step's squared gradient norm recorded in ``gnorm_vec``
    (every slot at step 1, slot ``step % 100`` after; of a sharded parameter, the sum of its shards' parts),
    and the gradient scale it gives, a float32 [1] tensor the update reads (nothing is read back)."""
    scale = torch.empty((1,), dtype=torch.float32, device=gnorm_vec.device)
    if not _is_dtensor(p):
        F._percentile_record(_local(p.grad), gnorm_vec, step, percentile, None, scale)
        return scale
    F._percentile_record(_local(p.grad), gnorm_vec, step, percentile, None)
    _sharded_sum(gnorm_vec if step == 1 else gnorm_vec[step % 100:step % 100 + 1], p)
    # the kernel's rule on the summed history, in torch ops: sqrt and quotient in float32, NaN sorting last
    current, clip = gnorm_vec[step % 100].sqrt(), torch.sort(gnorm_vec).values[percentile].sqrt()
    scale.copy_(torch.where(current > clip, clip / current, torch.ones_like(current)).reshape(1))
    return scale


class _StateOptimizer(Optimizer8bit):
    """What the one- and two-state optimizers share: the configuration and one parameter's update."""

    _two_states = False

    def __init__(self, optimizer_name, params, lr, betas, eps, weight_decay, optim_bits, args, min_8bit_size,
                 percentile_clipping, block_wise, max_unorm, skip_zeros, is_paged, extra_defaults=None):
        betas = _parse_betas(betas)
        _check_hyperparameters(lr, eps, betas, weight_decay)
        if not 1 <= int(percentile_clipping) <= 100:
            raise ValueError(f"Invalid percentile_clipping: {percentile_clipping} (must be from 1 to 100; "
                             "100 turns clipping off)")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, **(extra_defaults or {}))
        super().__init__(params, defaults, optim_bits, is_paged)
        if args is None:
            args = _Args(dict(optim_bits=optim_bits, min_8bit_size=min_8bit_size,
                              percentile_clipping=percentile_clipping, block_wise=block_wise,
                              max_unorm=max_unorm, skip_zeros=skip_zeros))
        self.args = args
        self.optimizer_name = optimizer_name

    @torch.no_grad()
    def init_state(self, group, p, gindex, pindex):
        config = self.get_config(gindex, pindex, group)
        dtype = _state_dtype(config, p)  # of the whole parameter: every shard's states alike
        if _is_dtensor(p) and config["max_unorm"] > 0.0:
            raise NotImplementedError(f"{type(self).__name__}: update-norm clipping (max_unorm, LAMB/LARS' trust "
                                      "ratio) of a sharded parameter is not supported")
        if _is_dtensor(p) and dtype == torch.uint8 and not config["block_wise"]:
            raise NotImplementedError(f"{type(self).__name__}: tensor-wise 8-bit states (block_wise=False) of a "
                                      "sharded parameter are not supported: use block_wise=True")
        state = self.state[p]
        p = _local(p)  # the states are the local shard's: blocks of 256 of it
        state["step"] = 0
        two = self._two_states
        double = (2,) if self.optimizer_name == "ademamix" else ()  # ademamix keeps m1 and m2 in state1
        state["state1"] = self.get_state_buffer(p, dtype, double)
        if two:
            state["state2"] = self.get_state_buffer(p, dtype)
        if dtype == torch.uint8:
            state["qmap1"] = self._qmap("dynamic", p.device)
            if two:
                state["qmap2"] = self._qmap("udynamic", p.device)
            if config["block_wise"]:
                state["absmax1"] = torch.zeros((*double, _blocks(p.numel())), dtype=torch.float32, device=p.device)
                if two:
                    state["absmax2"] = torch.zeros((_blocks(p.numel()),), dtype=torch.float32, device=p.device)
            else:
                if double:
                    raise NotImplementedError("ademamix has no tensor-wise 8-bit states: use block_wise=True")
                for i in ((1, 2) if two else (1,)):
                    state[f"max{i}"] = torch.zeros((1,), dtype=torch.float32, device=p.device)
                    state[f"new_max{i}"] = torch.zeros((1,), dtype=torch.float32, device=p.device)
        if config["percentile_clipping"] < 100:
            state["gnorm_vec"] = torch.zeros((100,), dtype=torch.float32, device=p.device)
        if config["max_unorm"] > 0.0:
            state["unorm_vec"] = torch.zeros((1,), dtype=torch.float32, device=p.device)

    def _schedule(self, config, step):
        """(beta3, alpha) of this step: ademamix's warm-ups, the constants otherwise."""
        betas = config["betas"]
        beta3 = betas[2] if len(betas) >= 3 else 0.0
        alpha = config.get("alpha", 0.0)
        if config.get("t_alpha"):
            alpha = min(step * alpha / config["t_alpha"], alpha)
        if config.get("t_beta3"):
            ln_beta1, ln_beta3 = math.log(betas[0]), math.log(beta3)
            scale = step / config["t_beta3"]
            beta3 = min(math.exp(ln_beta1 * ln_beta3 / ((1 - scale) * ln_beta3 + scale * ln_beta1)), beta3)
        return beta3, alpha

    def _update_all(self, todo, configs, states) -> None:
        # every clipped parameter's scale first, then the updates, those that share a call (_key) batched; a subclass's
        # own update_step runs one parameter at a time
        if type(self).update_step is not _StateOptimizer.update_step:
            super()._update_all(todo, configs, states)
            return
        self._clip_scales = self._percentile_scales(todo, configs, states)
        try:
            own_key = type(self)._batch_key is not _StateOptimizer._batch_key
            tails: Dict[int, tuple] = {}
            batches: Dict[tuple, list] = {}
            for member, config, state in zip(todo, configs, states):
                if own_key:
                    key = self._batch_key(*member)
                    tensors = None if key is None else (_local(member[1].grad), _local(member[1]))
                else:
                    key, tensors = self._key(member[1], config, state, tails)
                if key is None:
                    self.update_step(*member)
                else:
                    batches.setdefault(key, []).append((member, state, tensors))
            for key, entries in batches.items():
                if len(entries) == 1:
                    self.update_step(*entries[0][0])
                else:
                    self._update_batch(key, entries)
        finally:
            self._clip_scales = {}

    def _batch_key(self, group, p, gindex, pindex) -> Optional[tuple]:
        """What a parameter's update shares with those it can run with in one call, or None to run it alone."""
        if type(self).update_step is not _StateOptimizer.update_step:
            return None
        return self._key(p, self.get_config(gindex, pindex, group), self.state[p], {})[0]

    def _key(self, p, config, state, tails) -> tuple:
        """(_batch_key of p, (gradient, parameter) as the kernels take them), or (None, None); ``tails`` keeps the
        keys' constants by configuration, computed once a step."""
        # percentile clipping without a scale from step() and tensor-wise states (no multi-tensor op) run alone;
        # clipped parameters pass their device scales, one an entry
        if "max1" in state:
            return None, None
        scale = None
        if config["percentile_clipping"] < 100:
            scale = getattr(self, "_clip_scales", {}).get(id(p))
            if scale is None:
                return None, None
        grad, p = _local(p.grad), _local(p)
        dtype = p.dtype
        if grad is None or not _contiguous(p) or not _contiguous(grad) or grad.dtype is not dtype:
            return None, None
        step = state["step"] + 1
        tail = tails.get(id(config))
        if tail is None or tail[0] != step:
            beta3, alpha = self._schedule(config, step)
            betas = tuple(config["betas"]) + (0.0,)
            tail = tails[id(config)] = (
                step, float(config["lr"]), float(betas[0]), float(betas[1]), beta3, alpha, float(config["eps"]),
                float(config["weight_decay"]), float(config["max_unorm"]), bool(config["skip_zeros"]))
        kind = "32bit" if state["state1"].dtype is _F32 else "8bit_blockwise"
        # one map per call: the same tensors
        return (kind, dtype, p.device, id(state.get("qmap1")), id(state.get("qmap2"))) + tail, (grad, p, scale)

    def _percentile_scales(self, todo, configs, states) -> Dict[int, torch.Tensor]:
        # every clipped parameter's scale on the device before any update (bitsandbytes reads each history back)
        scales: Dict[int, torch.Tensor] = {}
        for member, config, state in zip(todo, configs, states):
            percentile = config["percentile_clipping"]
            if percentile < 100:
                p = member[1]
                scales[id(p)] = _clip_scale(p, state["gnorm_vec"], state["step"] + 1, percentile)
        return scales

    def _update_batch(self, key, entries) -> None:
        """One multi-tensor update of ``entries``, (member, state, (gradient, parameter)) each, that share ``key``."""
        kind, _, _, _, _, step, lr, beta1, beta2, beta3, alpha, eps, weight_decay, max_unorm, skip_zeros = key
        states = [e[1] for e in entries]
        for st in states:
            st["step"] += 1
        g = [e[2][0] for e in entries]
        p = [e[2][1] for e in entries]
        clipped = [e[2][2] for e in entries]
        gnorm_scale = clipped if any(c is not None for c in clipped) else 1.0
        two = "state2" in states[0]
        if kind == "32bit":
            F.optimizer_update_32bit_multi(
                self.optimizer_name, g, p, [st["state1"] for st in states], beta1, eps, step, lr,
                [st["state2"] for st in states] if two else None, beta2, weight_decay, gnorm_scale,
                [st["unorm_vec"] for st in states] if max_unorm > 0.0 else None, max_unorm, skip_zeros,
                beta3=beta3, alpha=alpha)
        else:
            F.optimizer_update_8bit_blockwise_multi(
                self.optimizer_name, g, p, [st["state1"] for st in states],
                [st["state2"] for st in states] if two else None, beta1, beta2, beta3, alpha, eps, step, lr,
                states[0]["qmap1"], states[0].get("qmap2"), [st["absmax1"] for st in states],
                [st["absmax2"] for st in states] if two else None, weight_decay, gnorm_scale, skip_zeros)

    @torch.no_grad()
    def update_step(self, group, p, gindex, pindex):
        config = self.get_config(gindex, pindex, group)
        if not _is_dtensor(p):
            if not p.is_contiguous():
                p.data = p.data.contiguous()
            if not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()
        state = self.state[p]
        state["step"] += 1
        step = state["step"]
        gnorm_scale = 1.0
        if config["percentile_clipping"] < 100:
            gnorm_scale = getattr(self, "_clip_scales", {}).pop(id(p), None)
            if gnorm_scale is None:  # not computed by step(): clip here
                gnorm_scale = _clip_scale(p, state["gnorm_vec"], step, config["percentile_clipping"])
        grad, p = _local(p.grad), _local(p)
        if not p.is_contiguous() or not grad.is_contiguous():
            raise ValueError(f"{type(self).__name__}.step: a sharded parameter's local shard and its gradient's "
                             "must be contiguous")
        beta1 = config["betas"][0]
        beta2 = config["betas"][1] if len(config["betas"]) > 1 else 0.0
        beta3, alpha = self._schedule(config, step)
        unorm_vec = state.get("unorm_vec") if config["max_unorm"] > 0.0 else None
        state1, state2 = state["state1"], state.get("state2")
        lr = float(config["lr"])
        if state1.dtype == torch.float32:
            F.optimizer_update_32bit(self.optimizer_name, grad, p, state1, beta1, config["eps"], step, lr, state2,
                                     beta2, config["weight_decay"], gnorm_scale, unorm_vec,
                                     max_unorm=config["max_unorm"], skip_zeros=config["skip_zeros"], beta3=beta3,
                                     alpha=alpha)
        elif "absmax1" in state:
            F.optimizer_update_8bit_blockwise(self.optimizer_name, grad, p, state1, state2, beta1, beta2, beta3, alpha,
                                              config["eps"], step, lr, state["qmap1"], state.get("qmap2"),
                                              state["absmax1"], state.get("absmax2"), config["weight_decay"],
                                              gnorm_scale=gnorm_scale, skip_zeros=config["skip_zeros"])
        else:
            F.optimizer_update_8bit(self.optimizer_name, grad, p, state1, state2, beta1, beta2, config["eps"], step,
                                    lr, state["qmap1"], state.get("qmap2"), state["max1"], state.get("max2"),
                                    state["new_max1"], state.get("new_max2"), config["weight_decay"],
                                    gnorm_scale=gnorm_scale, unorm_vec=unorm_vec,
                                    max_unorm=config["max_unorm"])
            # this step's maxima scale the states from now on
            state["max1"], state["new_max1"] = state["new_max1"], state["max1"]
            if state2 is not None:
                state["max2"], state["new_max2"] = state["new_max2"], state["max2"]


class Optimizer2State(_StateOptimizer):
    """Optimizers with two states: adam (Adam, AdamW), lamb and ademamix (bitsandbytes' ``Optimizer2State``)."""

    _two_states = True

    def __init__(self, optimizer_name, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 optim_bits=32, args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True,
                 max_unorm=0.0, skip_zeros=False, is_paged=False, alpha=0.0, t_alpha=None, t_beta3=None):
        super().__init__(optimizer_name, params, lr, betas, eps, weight_decay, optim_bits, args, min_8bit_size,
                         percentile_clipping, block_wise, max_unorm, skip_zeros, is_paged,
                         extra_defaults=dict(alpha=alpha, t_alpha=t_alpha, t_beta3=t_beta3))


class Optimizer1State(_StateOptimizer):
    """Optimizers with one state: momentum (SGD), rmsprop, lion, adagrad, lars (``Optimizer1State``)."""

    def __init__(self, optimizer_name, params, lr=1e-3, betas=(0.9, 0.0), eps=1e-8, weight_decay=0.0,
                 optim_bits=32, args=None, min_8bit_size=4096, percentile_clipping=100, block_wise=True,
                 max_unorm=0.0, skip_zeros=False, is_paged=False):
        super().__init__(optimizer_name, params, lr, betas, eps, weight_decay, optim_bits, args, min_8bit_size,
                         percentile_clipping, block_wise, max_unorm, skip_zeros, is_paged)
