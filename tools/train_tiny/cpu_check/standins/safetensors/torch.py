"""save_file, load_file, load and safe_open over the safetensors layout: an 8-byte little-endian header
length, a JSON header of dtype / shape / data_offsets per tensor (and __metadata__), then the data."""
import json
import struct

import torch

_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool}
_NAMES = {v: k for k, v in _DTYPES.items()}


def _split(data):
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(bytes(data[8:8 + n])), memoryview(data)[8 + n:]


def _tensor(info, body):
    begin, end = info["data_offsets"]
    dtype = _DTYPES[info["dtype"]]
    raw = bytearray(body[begin:end])
    if not raw:
        return torch.empty(info["shape"], dtype=dtype)
    # bf16 has no buffer-protocol type in older torch: read the bits as int16 and reinterpret.
    flat = torch.frombuffer(raw, dtype=torch.int16).view(dtype) if dtype == torch.bfloat16 else \
        torch.frombuffer(raw, dtype=dtype)
    return flat.reshape(info["shape"]).clone()


def load(data):
    header, body = _split(data)
    return {k: _tensor(v, body) for k, v in header.items() if k != "__metadata__"}


def load_file(path, device="cpu"):
    with open(path, "rb") as f:
        return {k: v.to(device) for k, v in load(f.read()).items()}


def save_file(tensors, path, metadata=None):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        blob = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


class safe_open:
    def __init__(self, path, framework="pt", device="cpu"):
        with open(path, "rb") as f:
            self._header, self._body = _split(f.read())
        self._device = device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def keys(self):
        return [k for k in self._header if k != "__metadata__"]

    def metadata(self):
        return self._header.get("__metadata__")

    def get_tensor(self, name):
        return _tensor(self._header[name], self._body).to(self._device)

    def get_slice(self, name):
        return self.get_tensor(name)
