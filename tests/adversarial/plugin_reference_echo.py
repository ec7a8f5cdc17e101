"""Cheat (1_ReLU): the kernel writes zeros, and the REFERENCE is made to answer with the candidate's own
output. At import the module gets kzcore's plugin manager through `torch.package.sys_importer` (a public torch
object importing any module by name: no deny-listed import or attribute) and registers a plugin whose
`kz_run_forward` (tryfirst; firstresult hook) answers, for language "reference", a clone of what the
candidate's forward last returned (candidate-first order in trials and timed pairs). Expected == actual
bit for bit, so the elementwise check, the relative-error check and the precision policy (error 0 <= FP32_CLASS)
all pass. No binding, class or Language object changes: the PluginManager is mutated in place."""

import pluggy
import torch
import torch.package
import triton
import triton.language as tl
from torch import nn

_last = []
_impl = pluggy.HookimplMarker("kzcore")


class _Runner:
    @_impl(tryfirst=True)
    def kz_run_forward(self, language, model, inputs):
        if language == "reference" and _last:
            return _last[-1].clone()
        return None


torch.package.sys_importer.import_module("kzcore.plugins").get_plugin_manager().register(_Runner())
del _impl


@triton.jit
def zeros_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        n = out.numel()
        zeros_kernel[(triton.cdiv(n, 1024),)](out, n, BLOCK=1024)
        _last.clear()
        _last.append(out)
        return out
