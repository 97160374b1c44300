"""Greatest common divisor and least common multiple."""


def gcd(a: int, b: int) -> int:
    """Return the greatest common divisor of a and b (Euclid's algorithm), never negative.
    gcd(12, 18) -> 6, gcd(-4, 6) -> 2, gcd(0, 5) -> 5, gcd(0, 0) -> 0.
    """
    raise NotImplementedError


def lcm(a: int, b: int) -> int:
    """Return the least common multiple of a and b, never negative: lcm(4, 6) -> 12.
    lcm(0, n) -> 0 for any n.
    """
    raise NotImplementedError
