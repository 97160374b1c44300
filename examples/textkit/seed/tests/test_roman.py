import unittest

from textkit.roman import from_roman, to_roman


class TestRoman(unittest.TestCase):
    def test_to_roman(self):
        for n, s in [(1, "I"), (4, "IV"), (9, "IX"), (14, "XIV"), (40, "XL"), (90, "XC"),
                     (400, "CD"), (1994, "MCMXCIV"), (2024, "MMXXIV"), (3999, "MMMCMXCIX")]:
            self.assertEqual(to_roman(n), s)

    def test_to_roman_range(self):
        for n in (0, -1, 4000):
            with self.assertRaises(ValueError):
                to_roman(n)

    def test_from_roman(self):
        for n in range(1, 4000, 7):
            self.assertEqual(from_roman(to_roman(n)), n)

    def test_from_roman_bad(self):
        for s in ("", "ABC", "X1"):
            with self.assertRaises(ValueError):
                from_roman(s)
