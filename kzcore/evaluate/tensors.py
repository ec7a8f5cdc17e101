"""The tensor lists a forward takes and returns: outputs as a list, inputs cloned, refilled in place, or
compared for mutation. Neighbours: the stages (`loading`, `trials`, `timing`, `workcheck`) and `problem_check`."""

from __future__ import annotations


def as_list(outputs) -> list:
    if isinstance(outputs, (tuple, list)):
        return list(outputs)
    return [outputs]


def clone_inputs(inputs: list) -> list:
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def refill(buffers: list | None, values: list) -> list:
    """``values`` copied into ``buffers`` in place (same tensors, same pointers) when every tensor matches in
    shape, dtype and device; otherwise fresh clones of ``values``."""
    import torch

    def fits(b, v) -> bool:
        if isinstance(v, torch.Tensor):
            return isinstance(b, torch.Tensor) and (b.shape, b.dtype, b.device) == (v.shape, v.dtype, v.device)
        return not isinstance(b, torch.Tensor)

    if buffers is None or len(buffers) != len(values) or not all(map(fits, buffers, values)):
        return clone_inputs(values)
    for i, v in enumerate(values):
        if isinstance(v, torch.Tensor):
            buffers[i].copy_(v)
        else:
            buffers[i] = v
    return buffers


def changed_inputs(before: list, after: list) -> list[int]:
    import torch

    return [
        i
        for i, (b, a) in enumerate(zip(before, after))
        if isinstance(b, torch.Tensor) and not torch.equal(torch.nan_to_num(b), torch.nan_to_num(a))
    ]
