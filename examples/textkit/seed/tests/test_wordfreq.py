import unittest

from textkit.wordfreq import top_words


class TestWordfreq(unittest.TestCase):
    def test_counts_in_lower_case(self):
        self.assertEqual(top_words("The cat and the hat. THE end", 2), [("the", 3), ("and", 1)])

    def test_ties_alphabetical(self):
        self.assertEqual(top_words("b a c b a", 3), [("a", 2), ("b", 2), ("c", 1)])

    def test_apostrophes_and_punctuation(self):
        self.assertEqual(top_words("don't stop; don't-stop", 5), [("don't", 2), ("stop", 2)])

    def test_edges(self):
        self.assertEqual(top_words("", 3), [])
        self.assertEqual(top_words("one two", 0), [])
        self.assertEqual(top_words("one two", 10), [("one", 1), ("two", 1)])
