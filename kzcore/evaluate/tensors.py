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
    """The indices of the tensors in ``after`` whose contents differ from ``before``'s (a forward that wrote its
    inputs)."""
    import torch

    return [i for i, (b, a) in enumerate(zip(before, after)) if isinstance(b, torch.Tensor) and not same_bits(b, a)]


_INT_OF_SIZE = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


def same_bits(b, a) -> bool:
    """Whether two tensors hold the same values bit for bit (a NaN equals the same NaN, unlike ``==``): a copy of
    ``b`` that nothing wrote is. Floating tensors are compared through an integer view of their bits, in place
    (no copies of the inputs); complex ones through ``nan_to_num`` copies."""
    import torch

    if b.shape != a.shape or b.dtype != a.dtype:
        return False
    if b.is_floating_point() and b.element_size() in _INT_OF_SIZE:
        as_int = getattr(torch, _INT_OF_SIZE[b.element_size()])
        return torch.equal(b.view(as_int), a.view(as_int))
    if b.is_complex():
        return torch.equal(torch.nan_to_num(b), torch.nan_to_num(a))
    return torch.equal(b, a)


def refill_in_place(buffers: list, values: list, part: dict | None = None) -> None:
    """``values`` copied into ``buffers`` in place (same tensors, same pointers); non-tensors replaced. Both
    must match tensor for tensor in shape, dtype and device (the timed inputs are drawn from one problem).
    ``part`` (`refill_plan`): for input i, only its flat elements ``start:stop`` are copied (both contiguous;
    otherwise all of it)."""
    import torch

    if len(buffers) != len(values):
        raise ValueError(f"{len(values)} new input values for {len(buffers)} inputs")
    for i, v in enumerate(values):
        if isinstance(v, torch.Tensor):
            b = buffers[i]
            if not isinstance(b, torch.Tensor) or (b.shape, b.dtype, b.device) != (v.shape, v.dtype, v.device):
                raise ValueError(f"input {i}: a new draw of {tuple(v.shape)} {v.dtype} does not fit the timed buffer")
            span = (part or {}).get(i)
            if span is not None and b.is_contiguous() and v.is_contiguous():
                b.view(-1)[span[0] : span[1]].copy_(v.view(-1)[span[0] : span[1]])
            else:
                b.copy_(v)
        else:
            buffers[i] = v


REFILL_MIN_NUMEL = 1 << 20  # inputs smaller than this are always redrawn whole (their copy costs little)


def refill_plan(values: list, share: float, rng) -> dict | None:
    """For a partial refill: per tensor input of at least ``REFILL_MIN_NUMEL`` elements, a random contiguous
    span holding ``share`` of its flat elements, (start, stop); None when ``share`` is 1 (everything redrawn)."""
    import math

    import torch

    if share >= 1:
        return None
    plan = {}
    for i, v in enumerate(values):
        if isinstance(v, torch.Tensor) and v.numel() >= REFILL_MIN_NUMEL:
            m = max(1, math.ceil(v.numel() * share))
            start = rng.randrange(v.numel() - m + 1)
            plan[i] = (start, start + m)
    return plan


class NotOwned(Exception):
    """An output whose memory is not its own (see `snapshot`)."""


def require_owned(outputs: list) -> None:
    """Raises `NotOwned` for a plain tensor among ``outputs`` whose storage PyTorch's allocator did not make (not
    ``resizable()``: a non-owning view of foreign or freed memory, ``__cuda_array_interface__``, DLPack, a raw
    pointer), since what such memory holds can change under the check, or whose values are not what its memory
    holds (a negation or conjugation bit, which a copy of the storage would drop)."""
    import torch

    for i, t in enumerate(outputs):
        if type(t) in (torch.Tensor, torch.nn.Parameter) and (t.is_neg() or t.is_conj()):
            where = f"output {i}" if len(outputs) > 1 else "the output"
            raise NotOwned(
                f"{where} carries a lazy negation or conjugation bit (a view such as `.conj().imag`): its values are "
                "not what its memory holds; return a tensor whose memory holds its values"
            )
        if type(t) in (torch.Tensor, torch.nn.Parameter) and not t.untyped_storage().resizable():
            where = f"output {i}" if len(outputs) > 1 else "the output"
            raise NotOwned(
                f"{where} does not own its memory (a view of memory PyTorch's allocator did not hand out: foreign, "
                "DLPack or raw-pointer memory, which can be freed and reused under it); return a tensor allocated "
                "by PyTorch (torch.empty and the like)"
            )


def snapshot(outputs: list) -> list:
    """The outputs' values as they are now, in new memory: plain tensors are copied storage and all (same size,
    strides and offset, so the output check sees their layout as returned); anything else is passed on for the
    output check to judge. Raises `NotOwned` for a tensor that does not own its memory (`require_owned`)."""
    import torch

    require_owned(outputs)
    copies = []
    for t in outputs:
        if type(t) not in (torch.Tensor, torch.nn.Parameter):
            copies.append(t)
            continue
        copy = torch.empty(0, dtype=t.dtype, device=t.device)
        copy.set_(t.untyped_storage().clone(), t.storage_offset(), t.size(), t.stride())
        copies.append(copy)
    return copies
