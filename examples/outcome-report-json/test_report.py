import unittest

from report import counts, render


class ReportTest(unittest.TestCase):
    def test_counts(self):
        self.assertEqual(counts(["a", "b", "a"]), {"a": 2, "b": 1})

    def test_render_puts_the_most_frequent_first(self):
        self.assertEqual(render({"pear": 1, "apple": 2}), "apple: 2\npear: 1")


if __name__ == "__main__":
    unittest.main()
