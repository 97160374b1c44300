"""The Caesar cipher."""


def encode(text: str, shift: int) -> str:
    """Shift each ASCII letter of text by shift places, wrapping around the alphabet and
    keeping its case; every other character stays as it is. encode("Abc, xyz!", 3) ->
    "Def, abc!". shift may be negative or larger than 26."""
    raise NotImplementedError


def decode(text: str, shift: int) -> str:
    """Undo encode: decode(encode(t, s), s) == t."""
    raise NotImplementedError
