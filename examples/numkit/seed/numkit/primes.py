"""Prime numbers."""


def is_prime(n: int) -> bool:
    """Return True if n is a prime number, else False.

    A prime is an integer greater than 1 whose only divisors are 1 and itself, so
    is_prime(2) -> True, is_prime(9) -> False, and is_prime(n) is False for every n < 2.
    """
    raise NotImplementedError


def primes_below(n: int) -> list[int]:
    """Return every prime smaller than n, in increasing order.

    primes_below(10) -> [2, 3, 5, 7]; primes_below(2) -> [].
    """
    raise NotImplementedError
