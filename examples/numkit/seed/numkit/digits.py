"""The decimal digits of a number."""


def digit_sum(n: int) -> int:
    """Return the sum of the decimal digits of n; the sign is ignored.
    digit_sum(1234) -> 10, digit_sum(-56) -> 11, digit_sum(0) -> 0.
    """
    raise NotImplementedError


def is_palindrome(n: int) -> bool:
    """Return True if the decimal digits of n read the same backwards; the sign is
    ignored. is_palindrome(121) -> True, is_palindrome(-121) -> True,
    is_palindrome(123) -> False.
    """
    raise NotImplementedError
