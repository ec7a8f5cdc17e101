"""One decoding step's grouped-query attention over a static KV cache, as a Triton split-K kernel.

The static decoder (kz_models.graphdecode) attends one new query per row over a cache preallocated for the
prompt and every new token. Done as two batched matmuls, each KV head meets its few query heads (SmolLM2: 3)
as a matrix of 3 rows over the whole cache length, the cache's empty tail and the row's left padding included.
Here each program takes one (row, KV head) and one chunk of cache positions, reads only the positions that hold
keys for that row (from the row's first real token to the slot just written), and keeps a running softmax for
the KV head's query heads; the chunks' partial results are then merged. Everything stays on the device and the
grid's shape is fixed, so a CUDA graph can capture it; positions past the current slot are never read.

``attend(q, keys, values, first, end, scale)``: ``q`` [B, H, 1, D]; ``keys``/``values`` [B, KV, L, D];
``first`` [B] (each row's first valid cache slot: a left-padded prompt's first real token); ``end`` [1] (one past
the last valid slot). Returns [B, H, 1, D] in ``q``'s dtype. The kernel is compiled on first use (under
``TRITON_INTERPRET=1`` it runs in Triton's interpreter, on a CPU)."""

from __future__ import annotations

import functools
import os

CHUNK = 256  # cache positions per program
BLOCK = 64  # positions per step of a program's loop
MIN_ROWS = 16  # tl.dot's smallest operand: the KV head's query heads are padded to at least this


def supported(head_dim: int) -> str | None:
    """Why the kernel cannot serve heads of ``head_dim`` (None when it can)."""
    if head_dim < 16 or head_dim & (head_dim - 1):
        return f"head_dim {head_dim} is not a power of two of at least 16"
    return None


@functools.cache
def _kernel(interpret: bool):
    """The kernel, jitted for the mode Triton is in (``TRITON_INTERPRET`` is read when a function is jitted)."""
    import triton
    import triton.language as tl

    del interpret  # the cache key only

    @triton.jit
    def partial_attention(
        Q, K, V, FIRST, END, OUT, M, S,
        stride_qb, stride_qh,
        stride_kb, stride_kh, stride_kl,
        stride_vb, stride_vh, stride_vl,
        stride_ob, stride_oh, stride_oc,
        stride_mb, stride_mh,
        n_kv, scale,
        GROUPS: tl.constexpr, ROWS: tl.constexpr, D: tl.constexpr, CHUNK: tl.constexpr, BLOCK: tl.constexpr,
        IEEE: tl.constexpr,
    ):  # fmt: skip
        pair = tl.program_id(0)
        chunk = tl.program_id(1)
        b = pair // n_kv
        kv = pair % n_kv
        first = tl.load(FIRST + b)
        end = tl.load(END)
        g = tl.arange(0, ROWS)
        d = tl.arange(0, D)
        heads = kv * GROUPS + g
        real = g < GROUPS
        q = tl.load(Q + b * stride_qb + heads[:, None] * stride_qh + d[None, :], mask=real[:, None], other=0.0)
        m_i = tl.full([ROWS], float("-inf"), tl.float32)
        s_i = tl.zeros([ROWS], tl.float32)
        acc = tl.zeros([ROWS, D], tl.float32)
        lo = chunk * CHUNK
        begin = tl.maximum(lo, (first // BLOCK) * BLOCK)
        stop = tl.minimum(lo + CHUNK, end)
        for at in range(begin, stop, BLOCK):
            pos = at + tl.arange(0, BLOCK)
            valid = (pos >= first) & (pos < end)
            k = tl.load(K + b * stride_kb + kv * stride_kh + pos[:, None] * stride_kl + d[None, :],
                        mask=valid[:, None], other=0.0)  # fmt: skip
            if IEEE:
                scores = tl.dot(q.to(k.dtype), tl.trans(k), input_precision="ieee")
            else:
                scores = tl.dot(q.to(k.dtype), tl.trans(k))
            scores = tl.where(valid[None, :], scores * scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(scores, axis=1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp(m_i - m_safe)
            p = tl.exp(scores - m_safe[:, None])
            v = tl.load(V + b * stride_vb + kv * stride_vh + pos[:, None] * stride_vl + d[None, :],
                        mask=valid[:, None], other=0.0)  # fmt: skip
            if IEEE:
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
            else:
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            s_i = s_i * alpha + tl.sum(p, axis=1)
            m_i = m_new
        out = OUT + b * stride_ob + heads[:, None] * stride_oh + chunk * stride_oc + d[None, :]
        tl.store(out, acc, mask=real[:, None])
        tl.store(M + b * stride_mb + heads * stride_mh + chunk, m_i, mask=real)
        tl.store(S + b * stride_mb + heads * stride_mh + chunk, s_i, mask=real)

    return partial_attention


def attend(q, keys, values, first, end, scale: float):
    """See the module's docstring."""
    import torch
    import triton

    batch, heads, _, dim = q.shape
    n_kv, length = keys.shape[1], keys.shape[2]
    groups = heads // n_kv
    chunks = triton.cdiv(length, CHUNK)
    q = q.reshape(batch, heads, dim).contiguous()
    partial = torch.empty((batch, heads, chunks, dim), dtype=torch.float32, device=q.device)
    maxes = torch.empty((batch, heads, chunks), dtype=torch.float32, device=q.device)
    sums = torch.empty_like(maxes)
    kernel = _kernel(os.environ.get("TRITON_INTERPRET") == "1")
    kernel[(batch * n_kv, chunks)](
        q, keys, values, first, end, partial, maxes, sums,
        q.stride(0), q.stride(1),
        keys.stride(0), keys.stride(1), keys.stride(2),
        values.stride(0), values.stride(1), values.stride(2),
        partial.stride(0), partial.stride(1), partial.stride(2),
        maxes.stride(0), maxes.stride(1),
        n_kv, scale,
        GROUPS=groups, ROWS=max(MIN_ROWS, triton.next_power_of_2(groups)), D=dim, CHUNK=CHUNK, BLOCK=BLOCK,
        IEEE=keys.dtype == torch.float32,
    )  # fmt: skip
    # merge the chunks' running softmaxes: each chunk's sums and outputs rescaled to the row's overall maximum
    top = maxes.amax(dim=-1, keepdim=True)
    weight = torch.exp(maxes - torch.where(torch.isinf(top), torch.zeros_like(top), top))
    merged = (partial * weight[..., None]).sum(dim=2) / (sums * weight).sum(dim=-1, keepdim=True)
    return merged[:, :, None, :].to(q.dtype)
