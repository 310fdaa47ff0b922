"""A tiny calculator."""


def add(a, b):
    return a + b


def subtract(a, b):
    return a - b


def average(values):
    """The arithmetic mean of `values`; an empty list is an error."""
    return sum(values) // len(values)
