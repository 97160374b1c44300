"""Temperature conversions."""


def c_to_f(celsius: float) -> float:
    """Convert degrees Celsius to degrees Fahrenheit: F = C * 9 / 5 + 32.
    c_to_f(100) -> 212.0."""
    raise NotImplementedError


def f_to_c(fahrenheit: float) -> float:
    """Convert degrees Fahrenheit to degrees Celsius: C = (F - 32) * 5 / 9.
    f_to_c(212) -> 100.0."""
    raise NotImplementedError
