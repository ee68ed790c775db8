"""exactc: export small transformer models to standalone C programs that are the
bit-for-bit twins of a numpy reference, and verify that they are."""

__version__ = "0.1.0"
