"""The package version, in a module of its own.

Run folders record it without importing the package facade, which loads the API on first use.
"""

__version__ = "0.1.0"
