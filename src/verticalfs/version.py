"""The library's version: one place (a leaf module: importing it imports nothing else).

CHANGELOG.md says what each version changed; ``pyproject.toml`` reads it from here.
"""

__version__ = "0.8.2"
