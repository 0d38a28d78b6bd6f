from hypothesis import given
from hypothesis import strategies as st

from mushroom.text.segment import clauses, piece_index, sentences


def texts(pieces):
    return [p.text for p in pieces]


def test_sentence_ends_but_not_inside_numbers_abbreviations_or_initials():
    text = (
        "Dr. Smith was born in 1950. He won 3.5 million dollars! J. R. R. Tolkien wrote it, e.g. The Hobbit."
    )
    assert texts(sentences(text)) == [
        "Dr. Smith was born in 1950.",
        "He won 3.5 million dollars!",
        "J. R. R. Tolkien wrote it, e.g. The Hobbit.",
    ]
    assert texts(sentences("z. B. kam er am 23.2.2013 an. Er blieb.")) == [
        "z. B. kam er am 23.2.2013 an.",
        "Er blieb.",
    ]


def test_cjk_hindi_and_arabic_marks_end_sentences_without_spaces():
    assert texts(sentences("北京是中国的首都。它有很多人口！")) == ["北京是中国的首都。", "它有很多人口！"]
    assert texts(sentences("भारत एक देश है। इसकी राजधानी दिल्ली है।")) == [
        "भारत एक देश है।",
        "इसकी राजधानी दिल्ली है।",
    ]
    assert texts(sentences("هل هو هنا؟ نعم هو هنا.")) == ["هل هو هنا؟", "نعم هو هنا."]
    assert texts(sentences("line one\nline two")) == ["line one", "line two"]
    # the full-width full stop of zh answers, but not between full-width digits
    assert texts(sentences("它被命名为号．故填：奥斯托岑斯基．根据所学")) == [
        "它被命名为号．",
        "故填：奥斯托岑斯基．",
        "根据所学",
    ]
    assert texts(sentences("数值是３．５米。")) == ["数值是３．５米。"]
    # a word ending in a vowel sign is no one-letter initial ("दिन." read as "न.")
    assert texts(sentences("यह मेरा पहला दिन. वह डॉक्टर है.")) == ["यह मेरा पहला दिन.", "वह डॉक्टर है."]


def test_arabic_comma_and_semicolon_cut_clauses():
    text = "القاهرة هي عاصمة مصر الكبيرة والجميلة، وهي أكبر مدينة في العالم العربي كله."
    assert texts(clauses(text)) == [
        "القاهرة هي عاصمة مصر الكبيرة والجميلة،",
        "وهي أكبر مدينة في العالم العربي كله.",
    ]


def test_clauses_cut_long_sentences_and_keep_short_lists_whole():
    text = "Tolkien wrote the novel in 1937, and it was published by Allen and Unwin in London."
    assert texts(clauses(text)) == [
        "Tolkien wrote the novel in 1937,",
        "and it was published by Allen and Unwin in London.",
    ]
    assert texts(clauses("Flags are red, green and blue.")) == ["Flags are red, green and blue."]
    assert texts(
        clauses("It cost 1,000,000 dollars in the year 1990 alone, said the report by the bank.")
    ) == [
        "It cost 1,000,000 dollars in the year 1990 alone,",
        "said the report by the bank.",
    ]


@given(st.text(alphabet=st.sampled_from(list("ab .,;!?。\n1:-—Dr")), max_size=60))
def test_pieces_are_exact_ordered_disjoint_and_trimmed(text):
    for pieces in (sentences(text), clauses(text, 1)):
        last = 0
        for p in pieces:
            assert text[p.start : p.end] == p.text
            assert p.text and p.text == p.text.strip()
            assert p.start >= last
            last = p.end
        index = piece_index(pieces, len(text))
        assert all(index[i] == k for k, p in enumerate(pieces) for i in range(p.start, p.end))
        covered = {i for p in pieces for i in range(p.start, p.end)}
        assert all(text[i].isspace() for i in range(len(text)) if i not in covered)


def test_the_word_before_a_dot_is_found_however_long_it_is():
    """The search before a dot looks in a growing window: a word longer than it is still whole."""
    long_initials = "A." * 80  # 160 characters of one "word": an abbreviation-like run
    text = f"Born in {long_initials} and raised. Then more."
    assert [p.text for p in sentences(text)] == [f"Born in {long_initials} and raised.", "Then more."]
    plain = "x" * 5000
    assert [p.text for p in sentences(f"{plain}. Next one.")] == [f"{plain}.", "Next one."]
