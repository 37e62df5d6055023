"""The skip-thoughts tokenizer splits sentences with Punkt as the original ``preprocess`` did. The expected
splits are NLTK's own published outputs for its English model (the ``nltk.tokenize.punkt`` module docstring
and ``nltk.tokenize`` documentation), so these cases pin that the parameters are NLTK's: abbreviations,
initials, the orthographic context for a lowercase sentence start, and quotes and brackets."""

from __future__ import annotations

import pytest

from lnserve.models.tokenize import _punkt, punkt_sentences, treebank_tokens

CASES = [
    (  # abbreviation (Mr.), an initial (S.), a lowercase sentence start
        "Punkt knows that the periods in Mr. Smith and Johann S. Bach do not mark sentence boundaries.  "
        "And sometimes sentences can start with non-capitalized words.  i is a good variable name.",
        [
            "Punkt knows that the periods in Mr. Smith and Johann S. Bach do not mark sentence boundaries.",
            "And sometimes sentences can start with non-capitalized words.",
            "i is a good variable name.",
        ],
    ),
    (  # a decimal and line breaks inside sentences
        "Good muffins cost $3.88\nin New York.  Please buy me\ntwo of them.\n\nThanks.",
        ["Good muffins cost $3.88\nin New York.", "Please buy me\ntwo of them.", "Thanks."],
    ),
    (  # quotes and brackets after the period stay with their sentence
        '(How does it deal with this parenthesis?)  "It should be part of the previous sentence." '
        "\"(And the same with this one.)\" ('And this one!') \"('(And (this)) '?)\" [(and this. )]",
        [
            "(How does it deal with this parenthesis?)",
            '"It should be part of the previous sentence."',
            '"(And the same with this one.)"',
            "('And this one!')",
            "\"('(And (this)) '?)\"",
            "[(and this. )]",
        ],
    ),
    (  # several initials; known abbreviations (jan, feb) and U.S. mid-sentence
        "J. R. R. Tolkien wrote it. The U.S. economy grew 3.5 percent in Jan. and Feb. last year.",
        ["J. R. R. Tolkien wrote it.", "The U.S. economy grew 3.5 percent in Jan. and Feb. last year."],
    ),
]


@pytest.mark.parametrize(("text", "sentences"), CASES)
def test_punkt_splits_as_nltk_english(text: str, sentences: list[str]) -> None:
    assert punkt_sentences(text) == sentences


def test_parameters_are_the_english_model() -> None:
    params = _punkt().__self__._params  # type: ignore[attr-defined]
    assert len(params.abbrev_types) == 156 and {"mr", "dr", "jan", "u.s", "inc"} <= params.abbrev_types
    assert len(params.sent_starters) == 39 and len(params.collocations) == 37
    assert len(params.ortho_context) > 20_000


def test_a_line_with_two_sentences_tokenises_as_the_original() -> None:
    """Without Punkt the Treebank tokenizer left 'there.' whole (it only splits a final period)."""
    assert treebank_tokens("Hi there. Bye.") == ["Hi", "there", ".", "Bye", "."]
    assert treebank_tokens('He said "stop." Then he left.') == [
        "He",
        "said",
        "``",
        "stop",
        ".",
        "''",
        "Then",
        "he",
        "left",
        ".",
    ]
