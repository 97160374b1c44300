import unittest

from textkit.rle import decode, encode


class TestRle(unittest.TestCase):
    def test_encode(self):
        self.assertEqual(encode("WWWWBBBW"), "4W3BW")
        self.assertEqual(encode(""), "")
        self.assertEqual(encode("abc"), "abc")
        self.assertEqual(encode("  hsqq qww  "), "2 hs2q q2w2 ")

    def test_decode(self):
        self.assertEqual(decode("4W3BW"), "WWWWBBBW")
        self.assertEqual(decode("12A"), "AAAAAAAAAAAA")

    def test_round_trip(self):
        for t in ("", "a", "aaaaaaaaaaaaab", "xyz  zz"):
            self.assertEqual(decode(encode(t)), t)
