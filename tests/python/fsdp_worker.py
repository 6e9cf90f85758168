"""lowbit.optim under FSDP2 (fully_shard) on the CPU, gloo: the processes of test_optim_fsdp.py.

    python3 fsdp_worker.py train WORLD RENDEZVOUS OUT CLASS STEPS [KWARGS_JSON]
        trains a small MLP sharded over WORLD processes; rank 0 writes the
        full parameters after every step to OUT (torch.save).
    python3 fsdp_worker.py save WORLD RENDEZVOUS DIR CLASS STEPS MORE
        trains STEPS steps, saves model and optimizer by
        torch.distributed.checkpoint into DIR, trains MORE steps; rank 0
        writes the full parameters to DIR/after.pt.
    python3 fsdp_worker.py load WORLD RENDEZVOUS DIR CLASS MORE
        loads DIR at this world size, trains MORE steps; rank 0 writes the
        full parameters to DIR/resumed-WORLD.pt.
    python3 fsdp_worker.py error WORLD RENDEZVOUS OUT CLASS [KWARGS_JSON]
        one step; rank 0 writes the error it raised ("no error") to OUT.

RENDEZVOUS is a file path that does not exist yet (the processes meet
through it: no TCP port to collide with another run's).
Every process takes its own slice of each step's batch; the batches and the
initial model come from fixed seeds, so an unsharded run on the whole batch
(``reference`` below) is the same computation.
"""

from __future__ import annotations

import json
import os
import sys

import torch

BATCH = 8  # rows a step, split among the processes


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    # 33 and 7 rows: uneven shards; 33 x 40 = 1320 elements, 5+ blocks of 256 a state
    return torch.nn.Sequential(torch.nn.Linear(40, 33), torch.nn.Tanh(), torch.nn.Linear(33, 7))


def batch(step: int):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(BATCH, 40, generator=g), torch.randn(BATCH, 7, generator=g)


def optimizer(cls_name: str, params, kwargs):
    import lowbit.optim as optim

    return getattr(optim, cls_name)(params, lr=1e-2, min_8bit_size=0, **kwargs)


def train(m, opt, first: int, steps: int, rank: int, world: int, record=None) -> None:
    for step in range(first, first + steps):
        x, y = batch(step)
        rows = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
        loss = torch.nn.functional.mse_loss(m(x[rows]), y[rows])
        loss.backward()
        opt.step()
        opt.zero_grad()
        if record is not None:
            record.append(full_params(m))


def full_params(m):
    return [p.full_tensor().detach().clone() if hasattr(p, "full_tensor") else p.detach().clone()
            for p in m.parameters()]


def reference(cls_name: str, steps: int, kwargs) -> list:
    """The unsharded run: one process, the whole batch each step."""
    m = model()
    opt = optimizer(cls_name, m.parameters(), kwargs)
    record: list = []
    train(m, opt, 0, steps, 0, 1, record)
    return record


def reference_split(cls_name: str, steps: int, kwargs, world: int) -> list:
    """The unsharded run with each parameter's optimizer state split as FSDP2 shards it: one parameter
    per shard (a view of the whole one's rows, its gradient likewise), so the 8-bit blocks are the
    shards' ones."""
    m = model()
    pieces = []
    for p in m.parameters():
        p.grad = torch.zeros_like(p)
        for rows in torch.chunk(torch.arange(p.shape[0]), world):  # FSDP2's Shard(0) chunks
            if len(rows):
                piece = torch.nn.Parameter(p.data[rows[0]:rows[-1] + 1])
                piece.grad = p.grad[rows[0]:rows[-1] + 1]
                pieces.append(piece)
    opt = optimizer(cls_name, pieces, kwargs)
    record: list = []
    for step in range(steps):
        x, y = batch(step)
        for p in m.parameters():
            p.grad.zero_()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
        record.append(full_params(m))
    return record


def sharded(world: int):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    m = model()
    mesh = init_device_mesh("cpu", (world,))
    for layer in m:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    return m


def run(rank: int, world: int, rendezvous: str, mode: str, args: list) -> None:
    session(rank, world, rendezvous, mode, args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # done: no interpreter teardown, where gloo's threads have aborted finished processes


def session(rank: int, world: int, rendezvous: str, mode: str, args: list) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="file://" + os.path.abspath(rendezvous), rank=rank, world_size=world)
    try:
        m = sharded(world)
        if mode == "train":
            out, cls_name, steps = args[0], args[1], int(args[2])
            kwargs = json.loads(args[3]) if len(args) > 3 else {}
            opt = optimizer(cls_name, m.parameters(), kwargs)
            record: list = []
            train(m, opt, 0, steps, rank, world, record)
            if rank == 0:
                torch.save(record, out)
            dist.barrier()
            return
        if mode == "error":  # one step of CLASS; rank 0 writes the error's text (or "no error") to OUT
            out, cls_name = args[0], args[1]
            opt = optimizer(cls_name, m.parameters(), json.loads(args[2]) if len(args) > 2 else {})
            try:
                train(m, opt, 0, 1, rank, world)
                text = "no error"
            except Exception as e:  # noqa: BLE001
                text = f"{type(e).__name__}: {e}"
            if rank == 0:
                with open(out, "w") as f:
                    f.write(text)
            dist.barrier()
            return
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        folder, cls_name = args[0], args[1]
        opt = optimizer(cls_name, m.parameters(), {})
        if mode == "save":
            steps, more = int(args[2]), int(args[3])
            train(m, opt, 0, steps, rank, world)
            model_sd, optim_sd = get_state_dict(m, opt)
            dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=folder)
            if rank == 0:
                with open(os.path.join(folder, "steps.json"), "w") as f:
                    json.dump({"steps": steps}, f)
            train(m, opt, steps, more, rank, world)
            full = full_params(m)  # a collective: every rank
            if rank == 0:
                torch.save(full, os.path.join(folder, "after.pt"))
        else:  # load
            more = int(args[2])
            with open(os.path.join(folder, "steps.json")) as f:
                steps = json.load(f)["steps"]
            model_sd, optim_sd = get_state_dict(m, opt)
            state = {"model": model_sd, "optim": optim_sd}
            dcp.load(state, checkpoint_id=folder)
            set_state_dict(m, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
            train(m, opt, steps, more, rank, world)
            full = full_params(m)
            if rank == 0:
                torch.save(full, os.path.join(folder, f"resumed-{world}.pt"))
        dist.barrier()  # every rank done (rank 0's files written) before the group goes
    finally:
        dist.destroy_process_group()


def main() -> None:
    import torch.multiprocessing as mp

    mode, world, rendezvous = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    mp.spawn(run, args=(world, rendezvous, mode, sys.argv[4:]), nprocs=world, join=True)


if __name__ == "__main__":
    main()
