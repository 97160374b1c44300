import unittest

from numkit.digits import digit_sum, is_palindrome


class TestDigits(unittest.TestCase):
    def test_digit_sum(self):
        self.assertEqual(digit_sum(1234), 10)
        self.assertEqual(digit_sum(-56), 11)
        self.assertEqual(digit_sum(0), 0)
        self.assertEqual(digit_sum(9999999999), 90)

    def test_is_palindrome(self):
        for n in (0, 7, 11, 121, 12321, -121):
            self.assertTrue(is_palindrome(n), n)
        for n in (10, 123, 1222, -12):
            self.assertFalse(is_palindrome(n), n)
