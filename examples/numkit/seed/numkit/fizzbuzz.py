"""FizzBuzz."""


def fizzbuzz(n: int) -> list[str]:
    """Return the FizzBuzz words for the numbers 1 to n, as a list of n strings.

    For each number: "FizzBuzz" if it is divisible by 3 and by 5, else "Fizz" if it is
    divisible by 3, else "Buzz" if it is divisible by 5, else the number itself as a
    string. fizzbuzz(5) -> ["1", "2", "Fizz", "4", "Buzz"]; fizzbuzz(0) -> [].
    """
    raise NotImplementedError
