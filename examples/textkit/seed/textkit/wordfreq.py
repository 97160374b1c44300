"""Word frequencies."""


def top_words(text: str, n: int) -> list[tuple[str, int]]:
    """Return the n most frequent words of text as (word, count) pairs.

    Words are runs of letters (a-z, A-Z) and apostrophes, compared in lower case.
    Order: highest count first; equal counts in alphabetical order. Fewer than n words:
    return them all. n <= 0: return [].
    """
    raise NotImplementedError
