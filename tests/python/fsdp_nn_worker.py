"""FSDP-QLoRA on lowbit.nn.Linear4bit: the processes of test_nn_fsdp.py.

    python3 fsdp_nn_worker.py WORLD RENDEZVOUS CHECKPOINT OUT STEPS

Every process loads the float tiny Llama at CHECKPOINT through lowbit.nn.from_pretrained, quantized on load to NF4
with double quant and quant_storage=torch.bfloat16, puts peft's LoRA (r 8, every projection, gradient checkpointing
without reentrance: the QLoRA recipe) on it, and builds the same model twice: one sharded by fully_shard (each
decoder layer, then the root; the 4-bit weights are sharded as bfloat16 tensors with the float ones), one left
whole. On that pair it
- runs one input through both (eval, no grad);
- gathers the sharded model's full state dict (get_model_state_dict, full_state_dict=True);
- trains STEPS steps of lowbit.optim.AdamW: each process the sharded model on its rows of the batch, the whole
  model on the whole batch;
- gathers the full state dict again, loads it into a fresh whole model and, through set_model_state_dict, into a
  fresh sharded one (both built with other adapters), and runs the input through them;
- saves the sharded state dict with torch.distributed.checkpoint (OUT.dcp) and loads it into another fresh
  sharded model;
- does the same for the forward and the state dicts of Linear4bit layers in other formats and storages
  (fp4 / nf4, uint8 / float32 / float16, with and without double quant, biases, uneven shards);
- provokes the errors of a sharded Linear4bit: a layer called outside the module that gathers its weight,
  a MixedPrecisionPolicy that casts the codes, a state dict of another quant_storage loaded into the shards,
  merging the adapters into the sharded weights.
Rank 0 writes what it saw to OUT (torch.save); the test compares.

The processes run on the CPU with gloo, or on CUDA with nccl where WORLD CUDA devices are visible.
RENDEZVOUS is a file path that does not exist yet (the processes meet through it).
"""

from __future__ import annotations

import os
import sys
import warnings

import torch

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
BATCH, SEQ = 4, 16  # rows a step (split among the processes), tokens a row
LR = 5e-3


def device_for(rank: int, world: int) -> torch.device:
    if torch.cuda.is_available() and torch.cuda.device_count() >= world:
        return torch.device("cuda", rank)
    return torch.device("cpu")


def batch(step: int, vocab: int) -> torch.Tensor:
    return torch.randint(0, vocab, (BATCH, SEQ), generator=torch.Generator().manual_seed(1000 + step))


def build(checkpoint: str, device: torch.device, adapter_seed: int = 0):
    """The QLoRA model: NF4 (double quant) layers stored as bfloat16, LoRA adapters drawn from ``adapter_seed``
    (peft draws lora_A at random and zeroes lora_B; a nonzero seed draws lora_B too, so that those adapters
    change the output)."""
    import peft
    import transformers

    import lowbit.nn as lnn

    config = dict(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                  bnb_4bit_quant_storage=torch.bfloat16)
    model = lnn.from_pretrained(transformers.AutoModelForCausalLM, checkpoint, quantization_config=config,
                                device=device, compute_dtype=torch.float32)
    model = peft.prepare_model_for_kbit_training(model)
    # peft turns checkpointing on only for models transformers loaded through bitsandbytes (docs/hf.md)
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:  # transformers before 5.23
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    lora = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=TARGETS, task_type="CAUSAL_LM")
    lnn.register_peft(lora)  # lowbit's LoRA layers: peft's forward, merging by requantizing
    torch.manual_seed(adapter_seed)
    model = peft.get_peft_model(model, lora)
    if adapter_seed:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.02, generator=torch.Generator(device=p.device).manual_seed(adapter_seed))
    return model


def checkpointing(model) -> bool:
    """Whether the decoder layers recompute their activations in the backward."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


def shard(model, mesh, **kwargs):
    from torch.distributed.fsdp import fully_shard

    for layer in model.base_model.model.model.layers:
        fully_shard(layer, mesh=mesh, **kwargs)
    fully_shard(model, mesh=mesh, **kwargs)
    return model


def logits(model, ids: torch.Tensor) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        out = model(input_ids=ids).logits.detach().cpu()
    model.train()
    return out


def full_state_dict(model) -> dict:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    return {k: v.detach().cpu().clone() for k, v in sd.items()}


def plain_state_dict(model) -> dict:
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def train(model, steps: int, vocab: int, rank: int, world: int, device: torch.device) -> list:
    """The losses of ``steps`` AdamW steps, each process on its rows of each batch (averaged over the processes)."""
    import torch.distributed as dist

    import lowbit.optim

    opt = lowbit.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR, weight_decay=0.0)
    rows = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    losses = []
    for step in range(steps):
        ids = batch(step, vocab)[rows].to(device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        total = loss.detach().clone()
        if dist.is_initialized() and world > 1:
            dist.all_reduce(total)
            total /= world
        losses.append(float(total))
    return losses


def error_of(fn) -> str:
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the test reads the message
        return f"{type(e).__name__}: {e}"
    return "no error"


def layers(device: torch.device):
    """Linear4bit layers of other formats and storages, sharded by the root alone: fp4 blocks of 128 without double
    quant in uint8 (1475 bytes: shards of 738 and 737 at two processes) with a bias, nf4 in float32 and fp4 in
    float16 with double quant."""
    import lowbit.nn as lnn

    torch.manual_seed(3)
    specs = [(59, 50, "fp4", torch.uint8, False, 128, True), (50, 24, "nf4", torch.float32, True, 64, False),
             (24, 40, "fp4", torch.float16, True, 64, True)]
    mods = []
    for k, n, kind, storage, nested, blocksize, bias in specs:
        m = lnn.Linear4bit(k, n, bias=bias, quant_type=kind, quant_storage=storage, compress_statistics=nested,
                           blocksize=blocksize)
        m.load_state_dict(torch.nn.Linear(k, n, bias=bias).state_dict())
        mods += [m.to(device), torch.nn.ReLU()]
    model = torch.nn.Sequential(*mods[:-1])
    model.requires_grad_(False)
    return model


def mixed(mesh, device: torch.device) -> dict:
    """The layers of ``layers``, whole and sharded: outputs, full state dicts (of the sharded weights, and of the
    gathered ones that a root keeps after a forward without grad), the gathered one loaded into other shards."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.fsdp import fully_shard

    whole, sharded = layers(device), fully_shard(layers(device), mesh=mesh)
    x = torch.randn(5, 59, generator=torch.Generator().manual_seed(4)).to(device)
    out = {"shards": [m.weight.to_local().shape[0] for m in sharded if hasattr(m, "weight")]}
    out["state"] = {"whole": plain_state_dict(whole), "sharded": full_state_dict(sharded)}
    with torch.no_grad():
        out["whole"], out["sharded"] = whole(x).cpu(), sharded(x).cpu()
    out["kept"] = [type(m.weight).__name__ for m in sharded if hasattr(m, "weight")]
    out["state_kept"] = full_state_dict(sharded)
    again = fully_shard(layers(device), mesh=mesh)
    with torch.no_grad():
        for p in again.parameters():  # other codes and biases before the load
            p.to_local().zero_()
        out["zeroed"] = again(x).cpu()
    again.reshard()  # loading copies into the shards
    set_model_state_dict(again, dict(out["state"]["sharded"]), options=StateDictOptions(full_state_dict=True))
    with torch.no_grad():
        out["reloaded"] = again(x).cpu()
    return out


def errors(model, checkpoint: str, mesh, device: torch.device, vocab: int) -> dict:
    """What a sharded Linear4bit refuses, and how it says so."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    import lowbit.nn as lnn

    out = {}
    q = model.base_model.model.model.layers[0].self_attn.q_proj.base_layer  # in layer 0's group: sharded now
    assert isinstance(q, lnn.Linear4bit)
    out["sharded_call"] = error_of(lambda: q(torch.randn(2, q.in_features, device=device)))
    # a state dict of uint8 codes into shards of bfloat16 ones
    other = lnn.Linear4bit(q.in_features, q.out_features, bias=False, quant_type="nf4", quant_storage=torch.uint8)
    other = other.to(device)
    out["storage_load"] = error_of(lambda: q.load_state_dict(other.state_dict()))
    out["merge"] = error_of(model.merge_adapter)
    # param_dtype float16 casts the bfloat16 codes as it gathers them
    cast = shard(build(checkpoint, device), mesh, mp_policy=MixedPrecisionPolicy(param_dtype=torch.float16))
    out["cast"] = error_of(lambda: cast(input_ids=batch(0, vocab).to(device)))
    return out


def session(rank: int, world: int, rendezvous: str, checkpoint: str, out: str, steps: int) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh

    import lowbit.nn as lnn

    device = device_for(rank, world)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method="file://" + os.path.abspath(rendezvous), rank=rank,
                            world_size=world)
    try:
        mesh = init_device_mesh(device.type, (world,))
        whole = build(checkpoint, device)
        sharded = shard(build(checkpoint, device), mesh)
        vocab = whole.config.vocab_size
        probe = torch.randint(0, vocab, (3, 11), generator=torch.Generator().manual_seed(7)).to(device)
        record: dict = {"world": world, "device": str(device),
                        "checkpointing": [checkpointing(m) for m in (whole, sharded)]}

        mine = {"whole": logits(whole, probe), "sharded": logits(sharded, probe)}
        record["forward"] = all_gather(mine, world)
        record["before"] = {"sharded": full_state_dict(sharded), "whole": plain_state_dict(whole)}
        record["shards"] = all_gather({name: (type(m.weight).__name__, m.weight.to_local().numel(), m.weight.numel())
                                       for name, m in sharded.named_modules() if isinstance(m, lnn.Linear4bit)},
                                      world)

        record["losses"] = {"sharded": train(sharded, steps, vocab, rank, world, device),
                            "whole": train(whole, steps, vocab, 0, 1, device)}
        after = full_state_dict(sharded)
        record["after"] = {"sharded": after, "whole": plain_state_dict(whole)}

        fresh = build(checkpoint, device, adapter_seed=1)
        fresh_before = logits(fresh, probe)
        fresh.load_state_dict({k: v.to(device) for k, v in after.items()})
        fresh_sharded = shard(build(checkpoint, device, adapter_seed=1), mesh)
        # set_model_state_dict puts the shards into the dict it is given: give it a copy
        set_model_state_dict(fresh_sharded, dict(after), options=StateDictOptions(full_state_dict=True))
        record["reload"] = all_gather({"sharded": logits(sharded, probe), "fresh_before": fresh_before,
                                       "whole": logits(fresh, probe), "resharded": logits(fresh_sharded, probe)},
                                      world)
        record["resharded_state"] = full_state_dict(fresh_sharded)

        # a sharded checkpoint (each process writes its shards) into another sharded model
        folder = out + ".dcp"
        dcp.save({"model": get_model_state_dict(sharded)}, checkpoint_id=folder)
        resumed = shard(build(checkpoint, device, adapter_seed=1), mesh)
        state = {"model": get_model_state_dict(resumed)}
        dcp.load(state, checkpoint_id=folder)
        set_model_state_dict(resumed, state["model"])
        record["resumed"] = all_gather({"sharded": logits(sharded, probe), "resumed": logits(resumed, probe)}, world)
        record["resumed_state"] = full_state_dict(resumed)
        record["errors"] = all_gather(errors(sharded, checkpoint, mesh, device, vocab), world)
        record["mixed"] = all_gather(mixed(mesh, device), world)
        if rank == 0:
            torch.save(record, out)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def all_gather(obj, world: int) -> list:
    """``obj`` of every process, by rank."""
    import torch.distributed as dist

    objs = [None] * world
    dist.all_gather_object(objs, obj)
    return objs


def run(rank: int, world: int, rendezvous: str, checkpoint: str, out: str, steps: int) -> None:
    warnings.filterwarnings("ignore")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    session(rank, world, rendezvous, checkpoint, out, steps)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # done: no interpreter teardown, where gloo's threads have aborted finished processes


def main() -> None:
    import torch.multiprocessing as mp

    world, rendezvous, checkpoint, out, steps = sys.argv[1:6]
    mp.spawn(run, args=(int(world), rendezvous, checkpoint, out, int(steps)), nprocs=int(world), join=True)


if __name__ == "__main__":
    main()
