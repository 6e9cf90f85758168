"""FSDP-QLoRA on lowbit.nn.Linear4bit: FSDP2 (``fully_shard``) shards, gathers and trains LoRA adapters over 4-bit
layers stored as bfloat16 (``quant_storage=torch.bfloat16``), at one and two processes.

tests/python/fsdp_nn_worker.py runs the processes (CPU with gloo here; CUDA with nccl where enough devices are
visible) on a tiny random Llama loaded by lowbit.nn.from_pretrained (NF4, double quant) with peft's LoRA on every
projection; each decoder layer and the root are fully_shard-ed. Against the same model left whole:
- the forward is the same bit for bit;
- the full state dict gathered from the shards (get_model_state_dict, full_state_dict=True) is the whole
  model's, 4-bit codes and quant-state entries included, bit for bit;
- training the adapters with lowbit.optim.AdamW, each process on its rows of the batch, gives the whole-batch
  run's losses and adapters within float32 reduction order (TOL_* below);
- the gathered state dict loads into a fresh whole model and (set_model_state_dict) into a fresh sharded one, and a
  sharded torch.distributed.checkpoint checkpoint into another sharded one, each giving the same output bit for bit;
- Linear4bit layers of other formats and storages (uint8, float32, float16) shard, gather and load the same way;
- what a sharded Linear4bit cannot do says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fsdp_env import require_fsdp2  # noqa: E402

torch = require_fsdp2()
pytest.importorskip("transformers", reason="transformers is not installed")
pytest.importorskip("peft", reason="peft is not installed")
pytest.importorskip("safetensors", reason="safetensors is not installed")

import lowbit  # noqa: E402
from hf_models import quiet_transformers, tiny_llama  # noqa: E402

quiet_transformers()
STEPS = 4
# Sharded, each process's loss is the mean over its rows and FSDP averages the processes' gradients; whole, one mean
# over all the rows. The same sums in another float32 order: the losses and gradients differ by about 1e-7
# relative. Adam divides each gradient by its running magnitude, so such a difference becomes about the same
# relative difference in an update (more where a gradient is tiny beside eps); after 4 steps the adapters differed
# by at most 3e-5 of their change at two processes (and not at all at one). The bounds leave room and stay far below
# what a wrong reduction (a process's rows dropped or counted twice) moves them by: about the change itself.
TOL_LOSS = 1e-5  # relative
TOL_ADAPTER = 1e-3  # of the largest change of that adapter over the run


def _bits(t: "torch.Tensor") -> "torch.Tensor":
    """The tensor's bits as integers: 4-bit codes stored as bfloat16 hold NaN patterns, which torch.equal calls
    unequal to themselves."""
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _same(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def _differing(got: dict, want: dict) -> list:
    assert sorted(got) == sorted(want)
    return [k for k in want if not _same(got[k], want[k])]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_llama(tmp_path_factory.mktemp("fsdp") / "fp32")


@pytest.fixture(scope="module", params=[1, 2], ids=["world1", "world2"])
def record(request, checkpoint, tmp_path_factory):
    world = request.param
    out = tmp_path_factory.mktemp(f"world{world}") / "record.pt"
    env = dict(os.environ)
    tree = os.path.dirname(os.path.dirname(lowbit.__file__))  # the lowbit this run tests
    env["PYTHONPATH"] = os.pathsep.join([tree, HERE, env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    with tempfile.TemporaryDirectory() as meet:
        cmd = [sys.executable, os.path.join(HERE, "fsdp_nn_worker.py"), str(world), os.path.join(meet, "rendezvous"),
               checkpoint, str(out), str(STEPS)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return torch.load(out, weights_only=False)


def test_4bit_weights_are_sharded(record):
    world = record["world"]
    by_rank = record["shards"]
    assert len(by_rank) == world
    names = by_rank[0].keys()
    assert len(names) == 14  # 7 projections in each of 2 layers
    for name in names:
        kinds = {r[name][0] for r in by_rank}
        local = [r[name][1] for r in by_rank]
        whole = by_rank[0][name][2]
        assert kinds == {"DTensor"}, (name, kinds)
        assert sum(local) == whole and max(local) == -(-whole // world), (name, local, whole)


def test_forward_equals_unsharded_bit_for_bit(record):
    for rank, out in enumerate(record["forward"]):
        assert torch.equal(out["sharded"], out["whole"]), (rank, float((out["sharded"] - out["whole"]).abs().max()))


def test_gathered_state_dict_equals_unsharded(record):
    got, want = record["before"]["sharded"], record["before"]["whole"]
    assert not _differing(got, want)
    absmax = [k for k in want if k.endswith(".base_layer.weight.absmax")]
    blobs = [k for k in want if k.endswith(".base_layer.weight.quant_state.bitsandbytes__nf4")]
    assert len(absmax) == len(blobs) == 14
    assert all(want[k[: -len(".absmax")]].dtype == torch.bfloat16 for k in absmax)  # the codes, stored as bfloat16


def test_training_equals_unsharded_within_reduction_order(record):
    assert record["checkpointing"] == [True, True]  # the layers recompute in the backward, gathered again
    losses = record["losses"]
    got, want = torch.tensor(losses["sharded"], dtype=torch.float64), torch.tensor(losses["whole"], dtype=torch.float64)
    assert len(got) == STEPS
    assert float(((got - want) / want).abs().max()) <= TOL_LOSS, (got, want)
    start = record["before"]["whole"]
    after, whole = record["after"]["sharded"], record["after"]["whole"]
    adapters = [k for k in whole if ".lora_" in k]
    assert len(adapters) == 28
    assert not _differing({k: after[k] for k in whole if k not in adapters},
                          {k: whole[k] for k in whole if k not in adapters})  # the frozen weights: untouched
    for k in adapters:
        change = float((whole[k] - start[k]).abs().max())
        assert change > 1e-3, (k, change)  # every adapter trained
        worst = float((after[k] - whole[k]).abs().max())
        assert worst <= TOL_ADAPTER * change, (k, worst, change)


def test_gathered_state_dict_loads_into_whole_and_sharded_models(record):
    for rank, out in enumerate(record["reload"]):
        assert not torch.equal(out["fresh_before"], out["sharded"])  # the fresh models start elsewhere
        assert torch.equal(out["whole"], out["sharded"]), rank
        assert torch.equal(out["resharded"], out["sharded"]), rank
    assert not _differing(record["resharded_state"], record["after"]["sharded"])


def test_sharded_checkpoint_resumes(record):
    for rank, out in enumerate(record["resumed"]):
        assert torch.equal(out["resumed"], out["sharded"]), rank
    assert not _differing(record["resumed_state"], record["after"]["sharded"])


def test_other_formats_and_storages(record):
    """fp4 / nf4 in uint8, float32 and float16 storage, with and without double quant, biases, uneven shards."""
    rows = {1: [[1475, 150, 240]], 2: [[738, 75, 120], [737, 75, 120]]}[record["world"]]  # each rank's shard rows
    for rank, out in enumerate(record["mixed"]):
        assert out["shards"] == rows[rank], (rank, out["shards"])
        assert torch.equal(out["sharded"], out["whole"]), rank
        want = out["state"]["whole"]
        assert [want[k].dtype for k in ("0.weight", "2.weight", "4.weight")] == [torch.uint8, torch.float32,
                                                                                 torch.float16]
        assert not _differing(out["state"]["sharded"], want), rank
        # after a forward without grad the root keeps the gathered weights (plain parameters) in place
        assert not _differing(out["state_kept"], want), (rank, out["kept"])
        assert not torch.equal(out["zeroed"], out["sharded"])
        assert torch.equal(out["reloaded"], out["sharded"]), rank


@pytest.mark.parametrize("case,words", [
    ("sharded_call", ["the weight is a sharded DTensor", "call the model through that module"]),
    ("cast", ["arrived as torch.float16 but its codes are stored as torch.bfloat16", "MixedPrecisionPolicy",
              "quant_storage equal to the param_dtype"]),
    ("storage_load", ["weight holds packed codes", "as torch.uint8", "sharded by FSDP2 as", "torch.bfloat16"]),
    ("merge", ["merging into a layer sharded by FSDP2 is not supported", "full_state_dict=True"]),
])
def test_what_a_sharded_layer_cannot_do_says_so(record, case, words):
    for rank, errors in enumerate(record["errors"]):
        text = errors[case]
        assert text.startswith("RuntimeError"), (rank, text)
        for w in words:
            assert w in text, (rank, w, text)
