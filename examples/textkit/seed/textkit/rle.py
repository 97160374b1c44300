"""Run-length encoding."""


def encode(text: str) -> str:
    """Encode runs of the same character as count + character, with a count of 1 left out:
    "WWWWBBBW" -> "4W3BW". text has no digits."""
    raise NotImplementedError


def decode(code: str) -> str:
    """Undo encode: "4W3BW" -> "WWWWBBBW"; counts may have several digits ("12A")."""
    raise NotImplementedError
