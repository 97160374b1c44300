import unittest

from numkit.primes import is_prime, primes_below


class TestPrimes(unittest.TestCase):
    def test_is_prime(self):
        for n in (2, 3, 5, 7, 11, 13, 97):
            self.assertTrue(is_prime(n), n)
        for n in (-7, 0, 1, 4, 9, 15, 100):
            self.assertFalse(is_prime(n), n)

    def test_primes_below(self):
        self.assertEqual(primes_below(10), [2, 3, 5, 7])
        self.assertEqual(primes_below(2), [])
        self.assertEqual(primes_below(30), [2, 3, 5, 7, 11, 13, 17, 19, 23, 29])
