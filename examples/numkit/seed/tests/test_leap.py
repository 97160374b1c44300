import unittest

from numkit.leap import days_in_month, is_leap


class TestLeap(unittest.TestCase):
    def test_is_leap(self):
        for year in (2024, 2000, 1996, 2400):
            self.assertTrue(is_leap(year), year)
        for year in (2023, 1900, 2100, 2001):
            self.assertFalse(is_leap(year), year)

    def test_days_in_month(self):
        self.assertEqual([days_in_month(2023, m) for m in range(1, 13)],
                         [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])
        self.assertEqual(days_in_month(2024, 2), 29)
        self.assertEqual(days_in_month(1900, 2), 28)

    def test_bad_month(self):
        for month in (0, 13):
            with self.assertRaises(ValueError):
                days_in_month(2024, month)
