"""Roman numerals."""


def to_roman(n: int) -> str:
    """Return n (1..3999) in Roman numerals, e.g. 1994 -> "MCMXCIV".

    Raise ValueError for n outside 1..3999.
    """
    raise NotImplementedError


def from_roman(s: str) -> int:
    """Return the value of the Roman numeral s, e.g. "MCMXCIV" -> 1994.

    Raise ValueError if s is empty or has a character that is not I, V, X, L, C, D or M.
    """
    raise NotImplementedError
