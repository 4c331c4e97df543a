"""Module-level functions for remote() in the tensor recording tests (the
workers import remote functions by module path)."""

import torch


def scale_rows(x, factor):
    return x * factor


def scale_rows_shape(x, factor):
    return torch.empty_like(x)


def split_halves(x):
    return x[: x.shape[0] // 2].clone(), x[x.shape[0] // 2:].clone()


def fails(x):
    raise ValueError("deliberate failure in a remote function")


def fails_shape(x):
    return torch.empty_like(x)


def make_ones(n):
    return torch.ones(n)


def double(x):
    return x * 2


def top_and_count(x, k):
    """Not torch-only in what it returns: the largest k values and a Python int."""
    return torch.topk(x.flatten(), k).values, int(x.numel())


def note(x, path):
    """Run for what it does on the worker: appends the shard's sum to a file."""
    with open(path, "a") as f:
        f.write(f"{float(x.sum())}\n")
