"""A silent stand-in for tqdm (imported by diffusers' logging; train.py prints its own progress)."""


class tqdm:
    def __init__(self, iterable=None, *args, **kwargs):
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable or [])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, *args, **kwargs):
        pass

    def close(self):
        pass

    def set_description(self, *args, **kwargs):
        pass
