"""Backfills for an older PyTorch (Debian 12's python3-torch 1.13): what the reference's modules touch on
import and in their forwards and that torch added later. Imported before train.py by run.sh; a newer torch
has all of these and is left alone."""
import math
import sys
from unittest import mock

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

for _name in ("xpu", "mps", "npu", "mlu", "musa"):
    if not hasattr(torch, _name):
        _backend = mock.MagicMock(name="torch." + _name)
        _backend.is_available = lambda: False
        setattr(torch, _name, _backend)
if not hasattr(torch, "compiler"):
    torch.compiler = mock.MagicMock(name="torch.compiler")
    torch.compiler.is_compiling = lambda: False
    torch.compiler.disable = lambda fn=None, *a, **k: fn if fn is not None else (lambda f: f)
for _name in ("float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64"):
    if not hasattr(torch, _name):  # names in annotations and dtype tables only: equal to no real dtype
        setattr(torch, _name, type(_name, (), {"__repr__": lambda self, n=_name: "torch." + n})())
if not hasattr(dist, "device_mesh"):
    dist.device_mesh = mock.MagicMock(name="torch.distributed.device_mesh")
    dist.device_mesh.DeviceMesh = type("DeviceMesh", (), {})
for _name in ("torch.distributed._functional_collectives", "torch.distributed.tensor",
              "torch.distributed.fsdp", "torch._dynamo", "torch.nn.attention",
              "torch.nn.attention.flex_attention"):
    if _name not in sys.modules:
        try:
            __import__(_name)
        except Exception:  # absent in this torch: context parallelism and compilation are never used here
            sys.modules[_name] = mock.MagicMock(name=_name)

if not hasattr(F, "scaled_dot_product_attention"):
    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                                     scale=None, enable_gqa=False):
        if enable_gqa and key.shape[-3] != query.shape[-3]:
            rep = query.shape[-3] // key.shape[-3]
            key, value = key.repeat_interleave(rep, dim=-3), value.repeat_interleave(rep, dim=-3)
        s = torch.matmul(query, key.transpose(-2, -1)) * (scale or 1.0 / math.sqrt(query.shape[-1]))
        if is_causal:  # aligned top-left, as torch's: query i sees keys 0..i
            q_len, k_len = query.shape[-2], key.shape[-2]
            keep = torch.ones(q_len, k_len, dtype=torch.bool, device=query.device).tril()
            s = s.masked_fill(~keep, float("-inf"))
        if attn_mask is not None:
            s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask
        p = torch.softmax(s.float(), dim=-1).to(query.dtype)
        if dropout_p > 0.0:
            p = F.dropout(p, dropout_p)
        return torch.matmul(p, value)

    F.scaled_dot_product_attention = scaled_dot_product_attention

if not hasattr(F, "rms_norm"):
    def rms_norm(x, normalized_shape, weight=None, eps=None):
        eps = torch.finfo(x.dtype).eps if eps is None else eps
        dims = tuple(range(-len(normalized_shape), 0))
        y = x * torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + eps)
        return y * weight if weight is not None else y

    F.rms_norm = rms_norm

if not hasattr(nn, "RMSNorm"):
    class RMSNorm(nn.Module):
        def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
            super().__init__()
            shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
            self.normalized_shape, self.eps, self.elementwise_affine = shape, eps, elementwise_affine
            if elementwise_affine:
                self.weight = nn.Parameter(torch.ones(shape, device=device, dtype=dtype))
            else:
                self.register_parameter("weight", None)

        def forward(self, x):
            return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    nn.RMSNorm = RMSNorm

if not hasattr(torch, "_foreach_lerp_"):
    def _foreach_lerp_(tensors, ends, weight):
        for t, e in zip(tensors, ends):
            t.lerp_(e, weight)

    torch._foreach_lerp_ = _foreach_lerp_
