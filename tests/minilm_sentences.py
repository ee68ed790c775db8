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

# A mixed-length batch of ordinary sentences (`make bench`'s MiniLM row): one word up to a
# paragraph of about 190 tokens, most between 8 and 40, as a search index would see them.
MIXED_BATCH = [
    "Hello",
    "Thanks!",
    "Where is the nearest train station?",
    "The meeting has been moved to Thursday afternoon.",
    "She bought fresh bread, two apples and a bottle of milk at the corner shop.",
    "A man is playing a guitar on the street.",
    "The cat slept in the sun all morning.",
    "Can you recommend a good book about the history of mathematics?",
    "Our flight was delayed by three hours because of a storm over the Atlantic.",
    "The children built a sandcastle and watched the tide slowly wash it away.",
    "Please remember to water the plants while I am away next week.",
    "He forgot his umbrella, so he arrived at the office soaking wet.",
    "The museum opens at nine and closes at five, except on public holidays when it stays closed.",
    "Researchers found that regular walks improve both sleep quality and mood in older adults.",
    "The recipe calls for flour, sugar, butter, eggs, a pinch of salt and a teaspoon of vanilla.",
    "After months of negotiation, the two companies finally agreed on the terms of the merger, "
    "which is expected to close early next year.",
    "The old lighthouse on the northern cliff was restored by volunteers and now welcomes visitors "
    "every summer weekend.",
    "If the weather stays dry, we will hike to the lake on Saturday, have lunch by the water, and "
    "come back down before dark.",
    "The new library has a quiet reading room on the top floor, a children's corner with picture "
    "books, and a small café by the entrance.",
    "Good morning, everyone.",
    "The train to the airport leaves every fifteen minutes from platform four.",
    "Learning a new language takes patience: a few words every day, some reading, some listening, "
    "and the courage to speak even when you make mistakes. Most learners find that the first months "
    "are the hardest, and that progress, once it comes, arrives in sudden steps rather than smoothly.",
    "My grandmother kept a garden behind her house with tomatoes, beans, potatoes and a row of "
    "sunflowers that grew taller than the fence.",
    "The committee reviewed the proposal in detail. It noted that the budget was realistic, that the "
    "timeline left room for delays, and that the team had delivered similar projects before. It asked "
    "for a clearer plan for the second year, in particular for how the results would be shared with "
    "the public, and for a short description of the risks and how each would be handled. After a long "
    "discussion the members agreed to fund the first year in full and to decide on the second year "
    "once the first report has been received and read by everyone on the committee, including the "
    "two new members who joined in the spring and who will also visit the site in the autumn. The "
    "chair thanked the applicants for their patience, reminded everyone that the next meeting will "
    "take place in the large room on the ground floor, and closed the session shortly after six "
    "o'clock, when most of the staff had already gone home for the evening.",
]
