import unittest

from textkit.caesar import decode, encode


class TestCaesar(unittest.TestCase):
    def test_encode(self):
        self.assertEqual(encode("Abc, xyz!", 3), "Def, abc!")
        self.assertEqual(encode("Hello", 0), "Hello")
        self.assertEqual(encode("Hello", 26), "Hello")
        self.assertEqual(encode("abc", -1), "zab")
        self.assertEqual(encode("Zz", 53), "Aa")

    def test_round_trip(self):
        text = "The quick brown fox jumps over the lazy dog, 42 times."
        for shift in (-30, -3, 1, 13, 25, 100):
            self.assertEqual(decode(encode(text, shift), shift), text)
