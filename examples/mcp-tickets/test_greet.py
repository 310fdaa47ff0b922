import unittest

from greet import greet


class GreetTest(unittest.TestCase):
    def test_greets_with_a_comma_and_an_exclamation_mark(self):
        self.assertEqual(greet("Ada"), "Hello, Ada!")


if __name__ == "__main__":
    unittest.main()
