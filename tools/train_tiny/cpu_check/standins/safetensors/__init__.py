"""A pure-Python reader and writer of the safetensors format for torch tensors, for machines without the
safetensors package: the reference's model loading imports it, train.py saves and loads with it."""
__version__ = "0.4.0"


class SafetensorError(Exception):
    pass


from .torch import safe_open  # noqa: E402,F401
