"""A tiny module for the pytest-venv example."""


def mean(values):
    return sum(values) / len(values)
