"""Luhn check digits (credit card numbers)."""


def is_valid(number: str) -> bool:
    """True if number passes the Luhn check. Spaces are ignored; any other non-digit, or
    fewer than two digits, makes it invalid. is_valid("4539 3195 0343 6467") -> True."""
    raise NotImplementedError


def check_digit(partial: str) -> int:
    """The digit (0-9) that, appended to the digits of partial, makes a valid number."""
    raise NotImplementedError
