"""Counts the words given on the command line and prints a report."""

import sys


def counts(words):
    """How often each word occurs."""
    result = {}
    for word in words:
        result[word] = result.get(word, 0) + 1
    return result


def render(counts):
    """One `word: count` line per word, most frequent first."""
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return "\n".join(f"{word}: {count}" for word, count in ordered)


def main(argv):
    print(render(counts(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
