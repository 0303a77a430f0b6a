"""An offline stand-in for the Hub client, which the reference's diffusers imports at start-up but which
train.py never calls (every model is built from a config and local files)."""
import sys
import types
from unittest import mock

__version__ = "0.99.0"


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = mock.MagicMock(name=self.__name__ + "." + name)
        setattr(self, name, value)
        return value


for _sub in ("constants", "file_download", "utils", "errors", "hf_api", "repocard", "repocard_data",
             "_commit_api", "utils.tqdm", "inference", "serialization"):
    sys.modules[__name__ + "." + _sub] = _Module(__name__ + "." + _sub)
constants = sys.modules[__name__ + ".constants"]
constants.HF_HOME = "/tmp/hf-home"
constants.HF_HUB_CACHE = constants.HUGGINGFACE_HUB_CACHE = "/tmp/hf-home/hub"
constants.HF_HUB_OFFLINE = constants.HF_HUB_DISABLE_TELEMETRY = True
constants.ENDPOINT = "https://huggingface.invalid"
utils = sys.modules[__name__ + ".utils"]
utils.__path__ = []


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return mock.MagicMock(name=__name__ + "." + name)
