"""Helpers for the runtime tests."""

import torch

from kernelpro_backend.backend import make_backend


def subgraphs_of(fn, *args):
    """The subgraphs the backend finds when compiling `fn` (inference, eager fallback)."""
    store = []
    backend = make_backend(observer=lambda kind, sgs: store.extend(sgs))
    torch.compile(fn, backend=backend, options={"fallback": "eager", "search": "off"})(*args)
    return store
