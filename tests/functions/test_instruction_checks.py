"""Every supported instruction, checked against a text that follows it and one that does
not, each built from the instruction's definition (IFEval and IFBench's training set)."""

from __future__ import annotations

from typing import Any

import pytest

from gymbus.functions.environments._instruction_registry import check_instruction
from gymbus.functions.environments._text_units import count_sentences, split_into_sentences, word_tokenize
from gymbus.functions.environments.instruction_following import SUPPORTED_INSTRUCTIONS

PROSE = (
    "This is a simple answer written in plain English so that anyone can read it without any trouble at all."
)

# (instruction id, kwargs, a text that follows it, a text that does not)
CASES: list[tuple[str, dict[str, Any] | None, str, str]] = [
    ("keywords:existence", {"keywords": ["fox", "dog"]}, "A FOX met a dog.", "A fox met a cat."),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "at least"}, "cat Cat", "one cat"),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "less than"}, "one cat", "cat cat"),
    ("keywords:forbidden_words", {"forbidden_words": ["part"]}, "a partial answer", "a Part of it"),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 2, "let_relation": "at least"}, "Zz", "z"),
    (
        "language:response_language",
        {"language": "en"},
        PROSE,
        "Ceci est une réponse simple écrite en français pour tout le monde.",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 3, "relation": "at least"},
        "Cats sat. Dogs ran. Birds flew.",
        "Cats sat. Dogs ran.",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 2, "relation": "less than"},
        "Dr. Smith came.",
        "One here. Two here.",
    ),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "one\n***\ntwo", "one\n***\n\n***\ntwo"),
    (
        "length_constraints:number_words",
        {"num_words": 4, "relation": "less than"},
        "one two three",
        "one two three four",
    ),
    (
        "length_constraints:number_words",
        {"num_words": 3, "relation": "at least"},
        "one, two; three",
        "one two",
    ),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 3, "nth_paragraph": 2, "first_word": "crash"},
        'Intro.\n\n"Crash, said he.\n\nEnd.',
        "Intro.\n\nBoom crash.\n\nEnd.",
    ),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "[name] at [place]", "[name] only"),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hi.\nP.S. bye", "Hi. PS bye"),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Hi.\np. p. s. more", "Hi. P.S. more"),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* a\n- b\n**bold**", "* a\n* b\n* c"),
    ("detectable_format:constrained_response", None, "My answer is maybe.", "Maybe."),
    (
        "detectable_format:number_highlighted_sections",
        {"num_highlights": 2},
        "*one* and **two**",
        "*one* and ** **",
    ),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "SECTION", "num_sections": 2},
        "SECTION 1\nfoo\nSECTION 2\nbar",
        "SECTION 1\nfoo",
    ),
    ("detectable_format:json_format", None, '```json\n{"a": 1}\n```', "{a: 1}"),
    ("detectable_format:title", {}, "<<Poem of joy>>\nverse", "<< >> verse"),
    ("combination:two_responses", None, "First.******Second.", "Same.******Same."),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Say hi"}, "say hi. Hi!", "Hi! Say hi"),
    (
        "startend:end_checker",
        {"end_phrase": "Any other questions?"},
        'Done. any other questions?"',
        "Any other questions? No.",
    ),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "at least"},
        "HELLO big WORLD",
        "HELLO big world",
    ),
    ("change_case:english_capital", None, PROSE.upper(), PROSE),
    ("change_case:english_lowercase", None, PROSE.lower(), PROSE),
    ("punctuation:no_comma", None, "no commas here", "one, two"),
    ("startend:quotation", None, ' "quoted" ', '"unbalanced'),
    (
        "copy:repeat_phrase",
        {"phrase": "The early bird catches the worm", "small_n": 2},
        "The early cat catches the worm. The early bird grabs the worm.",
        "The early cat catches the worm. The early bird catches the worm.",  # the last must differ
    ),
    ("copy:copy", {"prompt_to_repeat": "Copy me."}, "  copy me. ", "Copy me. Done."),
    (
        "new:copy_span_idx",
        {"prompt_to_repeat": "Hello brave world", "n_start": 6, "n_end": 11},
        "BRAVE",
        "brave world",
    ),
    ("detectable_format:sentence_hyphens", None, "One thing.-Two things.", "One thing. - Two things."),
    ("keywords:no_adjacent_consecutive", None, "apple cat egg", "apple banana"),
    ("detectable_format:square_brackets", None, "[every] [word]", "[every] word"),
    ("keywords:word_once", {"keyword": "moon"}, "the moon rose", "moon after moon"),
    (
        "keywords:word_count_different_numbers",
        {"keyword": "sun", "frequency": 2, "relation": "at least"},
        "sun and sun",
        "sun",
    ),
    ("keywords:exclude_word_harder", {"keyword": "red", "instruction": "x"}, "red, blue", "a red car"),
    ("paragraphs:paragraphs", {}, "First.\n***\nSecond.", "Only one."),
    ("paragraphs:paragraphs2", {}, "First.\n\nSecond.", "First.\n\n\n\nSecond."),
    (
        "first_word:first_word_sent",
        {"first_word": "relationship"},
        "Relationship one. Relationship two.",
        "Relationship one. Two.",
    ),
    ("first_word:first_word_answer", {"first_word": "Yes"}, "yes indeed", "Yes, indeed"),
    ("last_word:last_word_sent", {"last_word": "now"}, "Go now. Stop now!", "Go now. Stop later."),
    ("last_word:last_word_answer", {"last_word": "contest"}, "We won the contest.", "The contest was won."),
    ("detectable_format:bigram_wrapping", None, "<<I am>> <<at home>>", "<<I am>> at home"),
    ("copy:copying_simple", {"prompt_to_repeat": "Repeat this"}, "repeat this", "Repeat this now"),
    (
        "copy:copying_multiple",
        {"prompt_to_repeat": "Ask", "N": 2},
        "Ask ****** ask",
        "Ask ****** Ask ****** Ask",
    ),
    ("punctuation:punctuation_dot", None, "no dots here", "a dot."),
    ("punctuation:punctuation_exclamation", None, "calm", "wow!"),
    ("count:lowercase_counting", {"N": 2}, "ONE two THREE four", "one two three"),
    ("letters:letter_counting", {"N": 3, "relation": "at least"}, "abc", "ab1"),
    ("letters:letter_counting", {"N": 3, "relation": "less than"}, "ab", "abc"),
    ("letters:letter_counting2", {"letter": "a", "let_frequency": 2, "let_relation": "less than"}, "a", "aA"),
    (
        "count:counting_composition",
        {"n_sent": 1, "n_words": 3},
        "Cats eat fish\n***\nDogs chase cats\n***\nBirds sing songs",
        "Cats eat fish\n***\nDogs chase cats",
    ),
    ("count:count_unique", None, "every word differs", "word by word"),
    (
        "count:count_increment_word",
        {"keyword1": "tea", "keyword2": "cake"},
        "tea with cake and cake",
        "tea and cake",
    ),
    ("keywords:palindrome", None, "a racecar went by", "no such word here"),
    (
        "keywords:keyword_specific_position",
        {"keyword": "blue", "n": 2, "m": 3},
        "First one. The sky blue today.",
        "First one. Blue is the sky.",
    ),
    ("keywords:start_end", None, "Hello there hello", "Hello there."),
]


@pytest.mark.parametrize(("instruction_id", "kwargs", "follows", "breaks"), CASES)
def test_instruction(instruction_id: str, kwargs: dict[str, Any] | None, follows: str, breaks: str) -> None:
    assert check_instruction(instruction_id, kwargs, follows) == (True, None)
    followed, problem = check_instruction(instruction_id, kwargs, breaks)
    assert not followed and problem is None


def test_every_supported_instruction_has_a_case() -> None:
    assert {case[0] for case in CASES} == SUPPORTED_INSTRUCTIONS
    assert len(SUPPORTED_INSTRUCTIONS) == 54


def test_unknown_ids_and_bad_kwargs_are_not_followed_with_a_reason() -> None:
    assert check_instruction("new:not_a_thing", {}, PROSE) == (
        False,
        "unknown instruction id 'new:not_a_thing'",
    )
    assert check_instruction(None, {}, PROSE)[0] is False
    missing = check_instruction("length_constraints:number_words", {"relation": "at least"}, PROSE)
    assert missing == (False, "length_constraints:number_words: missing kwarg 'num_words'")
    bad_relation = check_instruction(
        "keywords:frequency", {"keyword": "a", "frequency": 1, "relation": "at most"}, "a"
    )
    assert bad_relation[0] is False and "relation" in str(bad_relation[1])
    unexpected = check_instruction("punctuation:no_comma", {"surprise": 1}, PROSE)
    assert unexpected == (False, "punctuation:no_comma: unexpected kwargs ['surprise']")
    assert check_instruction("punctuation:no_comma", ["not", "a", "dict"], PROSE)[0] is False
    wrong_type = check_instruction("detectable_format:number_bullet_lists", {"num_bullets": "five"}, "* a")
    assert wrong_type[0] is False and "integer" in str(wrong_type[1])


def test_none_kwarg_values_are_dropped_like_nemo_gym() -> None:
    kwargs = {"num_words": 3, "relation": "at least", "unused": None}
    assert check_instruction("length_constraints:number_words", kwargs, "one two three") == (True, None)


def test_a_keyword_that_is_not_a_valid_regex_is_not_followed() -> None:
    followed, problem = check_instruction("keywords:existence", {"keywords": ["(unclosed"]}, "(unclosed")
    assert not followed and "error" in str(problem)


def test_sentence_splitting_follows_ifeval() -> None:
    assert split_into_sentences("Mr. Smith met Dr. Jones. It was 3.5 p.m. today! Really?") == [
        "Mr. Smith met Dr. Jones.",
        "It was 3.5 p.m. today!",
        "Really?",
    ]
    assert count_sentences("Dr. Smith went home. He slept.") == 2
    assert word_tokenize("Hello, world. Bye!") == ["Hello", ",", "world", ".", "Bye", "!"]
