import unittest

from textkit.slug import slugify


class TestSlug(unittest.TestCase):
    def test_basic(self):
        self.assertEqual(slugify("  Hello, World! 2024 "), "hello-world-2024")

    def test_separators_collapse(self):
        self.assertEqual(slugify("a -- b__c"), "a-b-c")

    def test_empty(self):
        self.assertEqual(slugify(""), "")
        self.assertEqual(slugify("!!!"), "")

    def test_non_ascii_separates(self):
        self.assertEqual(slugify("café au lait"), "caf-au-lait")
