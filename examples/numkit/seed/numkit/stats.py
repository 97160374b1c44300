"""Averages of a list of numbers."""


def mean(xs: list[float]) -> float:
    """First raise ValueError if xs is empty. Otherwise return the arithmetic mean of xs:
    mean([1, 2, 3, 4]) -> 2.5.
    """
    raise NotImplementedError


def median(xs: list[float]) -> float:
    """First raise ValueError if xs is empty. Otherwise return the median of xs: the
    middle value of sorted(xs), or the mean of the two middle values when there is an even
    count. median([3, 1, 2]) -> 2, median([4, 1, 3, 2]) -> 2.5. Never call xs.sort(): the
    caller's list must stay unchanged; use a sorted copy, sorted(xs).
    """
    raise NotImplementedError
