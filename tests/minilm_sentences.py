"""The sentences of the MiniLM checks (tests/test_oracle.py, tests/test_minilm_programs.py):
padding (short and long mixed), punctuation, non-ASCII (accents, CJK, emoji), digits, a
single word, an empty string; the last is longer than the model's 256 tokens, so that,
truncated, it fills them all."""

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Hi",
    "",
    "What?! No... really?? (yes) -- [maybe]; {ok}: \"quoted\" & 'single' #hash @at 100%",
    "Crème brûlée, naïve café, Straße, smörgåsbord and jalapeño.",
    "東京は日本の首都です。",
    "Emoji are tokens too: 🙂🚀🎉",
    "In 2024, 3.14159 people owed $1,000,000.00 to 42 companies.",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    " ".join(f"word{k} is followed by another, and then more text" for k in range(60)),
]
