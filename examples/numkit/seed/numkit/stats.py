"""Averages of a list of numbers."""


def mean(xs: list[float]) -> float:
    """Return the arithmetic mean of xs: mean([1, 2, 3, 4]) -> 2.5.

    Raise ValueError if xs is empty.
    """
    raise NotImplementedError


def median(xs: list[float]) -> float:
    """Return the median of xs: the middle value of the sorted numbers, or the mean of the
    two middle values when there is an even count. median([3, 1, 2]) -> 2,
    median([4, 1, 3, 2]) -> 2.5. Do not change xs.

    Raise ValueError if xs is empty.
    """
    raise NotImplementedError
