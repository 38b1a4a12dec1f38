"""The package version, at the bottom so that any layer can report it (pyproject.toml holds the
same number; tests/test_layers.py checks they agree)."""

__version__ = "0.1.0"
