"""The package's version (one place: the REST API reports it, the package exports it)."""

__version__ = "0.1.0"
