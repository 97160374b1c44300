"""Leap years and month lengths (Gregorian calendar)."""


def is_leap(year: int) -> bool:
    """Return True if year is a leap year: divisible by 4, except years divisible by 100,
    which are leap years only if also divisible by 400. is_leap(2024) -> True,
    is_leap(1900) -> False, is_leap(2000) -> True, is_leap(2023) -> False.
    """
    raise NotImplementedError


def days_in_month(year: int, month: int) -> int:
    """First raise ValueError if month is not between 1 and 12. Otherwise return the
    number of days of month (1 = January .. 12 = December) in year: 30 for April, June,
    September and November (4, 6, 9, 11); for February (2) 29 if is_leap(year), else 28;
    31 for every other month. days_in_month(2024, 2) -> 29, days_in_month(2023, 4) -> 30.
    """
    raise NotImplementedError
