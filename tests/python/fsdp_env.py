"""What the FSDP2 tests (test_optim_fsdp.py, test_nn_fsdp.py) need: torch.distributed with gloo, and fully_shard."""

import pytest


def require_fsdp2():
    """Skips the calling test module unless torch has gloo and FSDP2's ``fully_shard``; returns torch."""
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)
    pytest.importorskip("torch.distributed.fsdp", reason="FSDP2 (fully_shard) needs torch >= 2.6")
    if not hasattr(torch.distributed.fsdp, "fully_shard"):
        pytest.skip("FSDP2 (fully_shard) needs torch >= 2.6", allow_module_level=True)
    return torch
