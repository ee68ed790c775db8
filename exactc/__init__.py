"""exactc: export small transformer models to standalone C programs that are the
bit-for-bit twins of a numpy reference, and verify that they are."""

__version__ = "0.1.0"


# The application API, loaded on first use (`import exactc` stays light: no numpy, no cffi):
# exactc.Program(DIR) is exactc.library's, exactc.SentenceEmbedder(FOLDER) exactc.embed's.
def __getattr__(name: str):
    if name in ("Program", "ProgramError"):
        from exactc import library

        return getattr(library, name)
    if name == "SentenceEmbedder":
        from exactc import embed

        return embed.SentenceEmbedder
    raise AttributeError(f"module 'exactc' has no attribute {name!r}")
