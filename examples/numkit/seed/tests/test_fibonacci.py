import unittest

from numkit.fibonacci import fib


class TestFib(unittest.TestCase):
    def test_small(self):
        self.assertEqual([fib(n) for n in range(10)], [0, 1, 1, 2, 3, 5, 8, 13, 21, 34])
        self.assertEqual(fib(10), 55)

    def test_large(self):
        self.assertEqual(fib(100), 354224848179261915075)

    def test_negative(self):
        with self.assertRaises(ValueError):
            fib(-1)
