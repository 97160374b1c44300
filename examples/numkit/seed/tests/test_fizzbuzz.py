import unittest

from numkit.fizzbuzz import fizzbuzz


class TestFizzBuzz(unittest.TestCase):
    def test_first_fifteen(self):
        self.assertEqual(
            fizzbuzz(15),
            ["1", "2", "Fizz", "4", "Buzz", "Fizz", "7", "8", "Fizz", "Buzz",
             "11", "Fizz", "13", "14", "FizzBuzz"],
        )

    def test_short_and_empty(self):
        self.assertEqual(fizzbuzz(1), ["1"])
        self.assertEqual(fizzbuzz(0), [])
