"""Which device the local pool runs on and which GPUs its workers get: ``auto`` resolved, a launcher's
``LOCAL_RANK`` respected, visible GPU numbers mapped to the machine's. Neighbour: `executors.local` (the pool)."""

from __future__ import annotations

import os

from kzcore.errors import KzError


def resolve_device(device: str) -> str:
    if device != "auto":
        if device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise KzError("--device cuda was asked for, but no CUDA GPU is visible")
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def physical_gpu(index: str, environ=os.environ) -> str:
    """The CUDA_VISIBLE_DEVICES entry for this process's visible GPU number ``index``: with
    ``CUDA_VISIBLE_DEVICES=2,3`` set for kz, visible GPU 1 is the machine's GPU 3 (or a UUID)."""
    visible = [x.strip() for x in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]
    if visible and int(index) < len(visible):
        return visible[int(index)]
    return index


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def pool_gpus(count: int, environ=os.environ) -> list[str]:
    """The visible GPUs (indices as strings) this process's pool puts workers on: all ``count`` of them, but
    under a launcher that starts one process per GPU (``accelerate launch``, ``torchrun``: ``LOCAL_RANK`` and
    ``LOCAL_WORLD_SIZE`` > 1 in the environment) only the process's own, ``LOCAL_RANK`` — otherwise every
    training process would spread its evaluator workers over every GPU, and their timings would collide."""
    local_world = int(environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    rank = environ.get("LOCAL_RANK")
    if local_world > 1 and rank is not None and count > 0:
        if count == 1:  # the launcher already narrowed CUDA_VISIBLE_DEVICES to this process's GPU
            return ["0"]
        if int(rank) >= count:
            raise KzError(f"LOCAL_RANK={rank} but this process sees only {count} GPU(s)")
        return [str(int(rank))]
    return [str(i) for i in range(count)]
