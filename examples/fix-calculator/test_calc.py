import unittest

from calc import add, average, subtract


class CalcTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_subtract(self):
        self.assertEqual(subtract(2, 3), -1)

    def test_average_keeps_fractions(self):
        self.assertEqual(average([1, 2]), 1.5)

    def test_average_of_nothing_is_a_value_error(self):
        with self.assertRaises(ValueError):
            average([])


if __name__ == "__main__":
    unittest.main()
