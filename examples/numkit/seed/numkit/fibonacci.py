"""Fibonacci numbers."""


def fib(n: int) -> int:
    """Return the n-th Fibonacci number: fib(0) -> 0, fib(1) -> 1, and
    fib(n) == fib(n - 1) + fib(n - 2) for n >= 2, so fib(10) -> 55.

    Raise ValueError if n is negative. Must be fast for n up to 1000 (use a loop).
    """
    raise NotImplementedError
