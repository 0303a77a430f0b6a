from . import tqdm  # noqa: F401
