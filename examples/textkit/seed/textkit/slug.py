"""URL slugs."""


def slugify(title: str) -> str:
    """Turn a title into a URL slug: lower case ASCII letters and digits, words joined by
    single hyphens, no hyphen at either end. "  Hello, World! 2024 " -> "hello-world-2024".
    Characters other than ASCII letters and digits separate words."""
    raise NotImplementedError
