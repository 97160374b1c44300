import unittest

from numkit.temperature import c_to_f, f_to_c


class TestTemperature(unittest.TestCase):
    def test_c_to_f(self):
        self.assertEqual(c_to_f(100), 212)
        self.assertEqual(c_to_f(0), 32)
        self.assertAlmostEqual(c_to_f(-40), -40)

    def test_f_to_c(self):
        self.assertEqual(f_to_c(212), 100)
        self.assertAlmostEqual(f_to_c(98.6), 37)

    def test_round_trip(self):
        for c in (-273.15, -10, 0, 21.5, 37):
            self.assertAlmostEqual(f_to_c(c_to_f(c)), c)
