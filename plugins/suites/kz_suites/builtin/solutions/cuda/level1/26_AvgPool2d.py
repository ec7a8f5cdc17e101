"""nn.AvgPool2d(3, stride=1, padding=1) in CUDA (count_include_pad: always divide by 9), one thread per output."""

import torch
from torch import nn

from kz_cuda import i32, load_kernels

SOURCE = r"""
// x [N*C, H, W] -> out [N*C, H, W]
extern "C" __global__ void avg_pool3x3_kernel(const float* __restrict__ x, float* __restrict__ out, int planes,
                                              int H, int W) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)planes * H * W) return;
    int ow = (int)(idx % W);
    long long t = idx / W;
    int oh = (int)(t % H);
    long long p = t / H;
    const float* xp = x + p * H * W;
    float acc = 0.0f;
    for (int dh = -1; dh <= 1; ++dh) {
        int ih = oh + dh;
        if (ih < 0 || ih >= H) continue;
        for (int dw = -1; dw <= 1; ++dw) {
            int iw = ow + dw;
            if (iw >= 0 && iw < W) acc += xp[ih * W + iw];
        }
    }
    out[idx] = acc * (1.0f / 9.0f);
}
"""

avg_pool3x3_kernel = load_kernels(SOURCE)["avg_pool3x3_kernel"]


def cdiv(a, b):
    return (a + b - 1) // b


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n, c, h, w = x.shape
        out = torch.empty_like(x)
        avg_pool3x3_kernel(grid=(cdiv(n * c * h * w, 256),), block=(256,), args=(x, out, i32(n * c), i32(h), i32(w)))
        return out
