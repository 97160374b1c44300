import unittest

from textkit.luhn import check_digit, is_valid


class TestLuhn(unittest.TestCase):
    def test_valid(self):
        self.assertTrue(is_valid("4539 3195 0343 6467"))
        self.assertTrue(is_valid("059"))
        self.assertTrue(is_valid("0 0"))

    def test_invalid(self):
        self.assertFalse(is_valid("8273 1232 7352 0569"))
        self.assertFalse(is_valid("0"))
        self.assertFalse(is_valid("055-444-285"))
        self.assertFalse(is_valid(""))

    def test_check_digit(self):
        self.assertEqual(check_digit("7992739871"), 3)
        for partial in ("453931950343646", "05", "123456789"):
            self.assertTrue(is_valid(partial + str(check_digit(partial))))
