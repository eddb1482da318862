"""IFEval's 25 verifiable instructions (Zhou et al., 2023), checked as IFEval checks them.

Each check's docstring states the instruction; the code follows IFEval's definition,
including its quirks (keywords are regular expressions, `***` dividers may sit at the
edges, a language that cannot be detected counts as followed). IFEval picks a random
value for a kwarg that is missing; here a missing kwarg means "not followed", with a
reason, so a reward never depends on chance.
"""

from __future__ import annotations

import collections
import functools
import json
import re
from collections.abc import Callable

from ._instruction_registry import Args, KwargError, compare, instruction
from ._text_units import count_sentences, count_words, word_tokenize

__all__: list[str] = []

_CONSTRAINED_RESPONSES = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


@functools.cache
def _langdetect() -> tuple[Callable[[str], str], type[Exception]]:
    """langdetect's `detect` and its error, imported on the first language check."""
    import langdetect
    from langdetect.detector_factory import DetectorFactory

    DetectorFactory.seed = 0  # langdetect samples at random; a fixed seed makes rewards repeatable
    return langdetect.detect, langdetect.LangDetectException


def load_libraries() -> None:
    """Import and load what the checks use (NLTK's tokenizers, langdetect's language
    profiles): seconds on a busy machine, which a worker spends at start-up."""
    word_tokenize("Warm up.")
    count_words("Warm up.")
    count_sentences("Warm up. Twice.")
    _detect_language("This sentence is written in English.")


def _detect_language(text: str) -> str | None:
    """The ISO 639-1 code langdetect reads in `text`, or `None` if it cannot tell."""
    detect, undetectable = _langdetect()
    try:
        return str(detect(text))
    except undetectable:
        return None


def _paragraphs_divided(text: str, divider: str) -> int | None:
    """Paragraphs between `divider`s: empty ones may only sit at either end (else `None`)."""
    paragraphs = re.split(divider, text)
    count = len(paragraphs)
    for index, paragraph in enumerate(paragraphs):
        if not paragraph.strip():
            if index not in (0, len(paragraphs) - 1):
                return None
            count -= 1
    return count


def markdown_paragraphs(text: str) -> int | None:
    """Paragraphs separated by the markdown divider `***`."""
    return _paragraphs_divided(text, r"\s?\*\*\*\s?")


@instruction("keywords:existence", "keywords")
def keyword_existence(text: str, args: Args) -> bool:
    """Include keywords {keywords} in the response."""
    return all(re.search(keyword, text, flags=re.IGNORECASE) for keyword in args.words("keywords"))


@instruction("keywords:frequency", "keyword", "frequency", "relation")
def keyword_frequency(text: str, args: Args) -> bool:
    """In your response, the word {keyword} should appear {relation} {frequency} times."""
    found = len(re.findall(args.string("keyword").strip(), text, flags=re.IGNORECASE))
    return compare(found, args.relation(), args.integer("frequency"))


@instruction("keywords:forbidden_words", "forbidden_words")
def forbidden_words(text: str, args: Args) -> bool:
    """Do not include keywords {forbidden_words} in the response."""
    return not any(
        re.search(r"\b" + word + r"\b", text, flags=re.IGNORECASE) for word in args.words("forbidden_words")
    )


@instruction("keywords:letter_frequency", "letter", "let_frequency", "let_relation")
def letter_frequency(text: str, args: Args) -> bool:
    """In your response, the letter {letter} should appear {let_relation} {let_frequency} times."""
    letter = args.string("letter").strip().lower()
    if len(letter) != 1 or not "a" <= letter <= "z":
        raise KwargError(f"kwarg 'letter' must be one ASCII letter, got {letter!r}")
    found = collections.Counter(text.lower())[letter]
    return compare(found, args.relation("let_relation"), args.integer("let_frequency"))


@instruction("language:response_language", "language")
def response_language(text: str, args: Args) -> bool:
    """Your ENTIRE response should be in {language} language, no other language is allowed."""
    detected = _detect_language(text)
    return detected is None or detected == args.string("language")


@instruction("length_constraints:number_sentences", "num_sentences", "relation")
def number_sentences(text: str, args: Args) -> bool:
    """Your response should contain {relation} {num_sentences} sentences."""
    return compare(count_sentences(text), args.relation(), args.integer("num_sentences"))


@instruction("length_constraints:number_paragraphs", "num_paragraphs")
def number_paragraphs(text: str, args: Args) -> bool:
    """There should be {num_paragraphs} paragraphs. Paragraphs are separated with the markdown divider: ***"""
    return markdown_paragraphs(text) == args.integer("num_paragraphs")


@instruction("length_constraints:number_words", "num_words", "relation")
def number_words(text: str, args: Args) -> bool:
    """Answer with {relation} {num_words} words."""
    return compare(count_words(text), args.relation(), args.integer("num_words"))


@instruction("length_constraints:nth_paragraph_first_word", "num_paragraphs", "nth_paragraph", "first_word")
def nth_paragraph_first_word(text: str, args: Args) -> bool:
    """There should be {num_paragraphs} paragraphs, separated by two new lines.
    Paragraph {nth_paragraph} must start with word {first_word}."""
    wanted, nth = args.integer("num_paragraphs"), args.integer("nth_paragraph")
    if not 0 < nth <= wanted:
        raise KwargError(f"nth_paragraph must be in 1..{wanted}, got {nth}")
    paragraphs = text.split("\n\n")
    count = sum(1 for paragraph in paragraphs if paragraph.strip())
    if nth > count or not paragraphs[nth - 1].strip():
        return False
    word = paragraphs[nth - 1].split()[0].strip().lstrip("'").lstrip('"')
    first = re.split(r"[.,?!'\"]", word, maxsplit=1)[0].lower()
    return count == wanted and first == args.string("first_word").lower()


@instruction("detectable_content:number_placeholders", "num_placeholders")
def number_placeholders(text: str, args: Args) -> bool:
    """The response must contain at least {num_placeholders} placeholders in square brackets."""
    return len(re.findall(r"\[.*?\]", text)) >= args.integer("num_placeholders")


@instruction("detectable_content:postscript", "postscript_marker")
def postscript(text: str, args: Args) -> bool:
    """At the end of your response, please explicitly add a postscript starting with {postscript_marker}."""
    marker = args.string("postscript_marker").strip()
    if marker == "P.P.S":
        pattern = r"\s*p\.\s?p\.\s?s.*$"
    elif marker == "P.S.":
        pattern = r"\s*p\.\s?s\..*$"
    else:
        pattern = r"\s*" + marker.lower() + r".*$"
    return bool(re.findall(pattern, text.lower(), flags=re.MULTILINE))


@instruction("detectable_format:number_bullet_lists", "num_bullets")
def number_bullet_lists(text: str, args: Args) -> bool:
    """Your answer must contain exactly {num_bullets} bullet points (`* ` or `- ` lines)."""
    stars = re.findall(r"^\s*\*[^\*].*$", text, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", text, flags=re.MULTILINE)
    return len(stars) + len(dashes) == args.integer("num_bullets")


@instruction("detectable_format:constrained_response")
def constrained_response(text: str, args: Args) -> bool:
    """Answer with one of: My answer is yes. / My answer is no. / My answer is maybe."""
    return any(option in text.strip() for option in _CONSTRAINED_RESPONSES)


@instruction("detectable_format:number_highlighted_sections", "num_highlights")
def highlighted_sections(text: str, args: Args) -> bool:
    """Highlight at least {num_highlights} sections with markdown, i.e. *highlighted section*."""
    single = [h for h in re.findall(r"\*[^\n\*]*\*", text) if h.strip("*").strip()]
    double = [h for h in re.findall(r"\*\*[^\n\*]*\*\*", text) if h[2:-2].strip()]
    return len(single) + len(double) >= args.integer("num_highlights")


@instruction("detectable_format:multiple_sections", "section_spliter", "num_sections")
def multiple_sections(text: str, args: Args) -> bool:
    """Your response must have {num_sections} sections, each starting with {section_spliter} X."""
    splitter = r"\s?" + args.string("section_spliter").strip() + r"\s?\d+\s?"
    return len(re.split(splitter, text)) - 1 >= args.integer("num_sections")


@instruction("detectable_format:json_format")
def json_format(text: str, args: Args) -> bool:
    """Entire output should be wrapped in JSON format (markdown ticks allowed)."""
    value = text.strip()
    for prefix in ("```json", "```Json", "```JSON", "```"):
        value = value.removeprefix(prefix)
    try:
        json.loads(value.removesuffix("```").strip())
    except ValueError:
        return False
    return True


@instruction("detectable_format:title")
def title(text: str, args: Args) -> bool:
    """Your answer must contain a title, wrapped in double angular brackets, such as <<poem of joy>>."""
    return any(found.lstrip("<").rstrip(">").strip() for found in re.findall(r"<<[^\n]+>>", text))


@instruction("combination:two_responses")
def two_responses(text: str, args: Args) -> bool:
    """Give two different responses, separated by 6 asterisk symbols: ******."""
    parts = text.split("******")
    kept = []
    for index, part in enumerate(parts):
        if part.strip():
            kept.append(part.strip())
        elif index not in (0, len(parts) - 1):
            return False
    return len(kept) == 2 and kept[0] != kept[1]


@instruction("combination:repeat_prompt", "prompt_to_repeat")
def repeat_prompt(text: str, args: Args) -> bool:
    """First repeat the request word for word without change, then give your answer."""
    return text.strip().lower().startswith(args.string("prompt_to_repeat").strip().lower())


@instruction("startend:end_checker", "end_phrase")
def end_checker(text: str, args: Args) -> bool:
    """Finish your response with this exact phrase {end_phrase}. No other words should follow."""
    return text.strip().strip('"').lower().endswith(args.string("end_phrase").strip().lower())


@instruction("change_case:capital_word_frequency", "capital_frequency", "capital_relation")
def capital_word_frequency(text: str, args: Args) -> bool:
    """In your response, words with all capital letters should appear {relation} {frequency} times."""
    capitals = sum(1 for word in word_tokenize(text) if word.isupper())
    return compare(capitals, args.relation("capital_relation"), args.integer("capital_frequency"))


@instruction("change_case:english_capital")
def english_capital(text: str, args: Args) -> bool:
    """Your entire response should be in English, and in all capital letters."""
    return text.isupper() and _detect_language(text) in (None, "en")


@instruction("change_case:english_lowercase")
def english_lowercase(text: str, args: Args) -> bool:
    """Your entire response should be in English, and in all lowercase letters."""
    return text.islower() and _detect_language(text) in (None, "en")


@instruction("punctuation:no_comma")
def no_comma(text: str, args: Args) -> bool:
    """In your entire response, refrain from the use of any commas."""
    return "," not in text


@instruction("startend:quotation")
def quotation(text: str, args: Args) -> bool:
    """Wrap your entire response with double quotation marks."""
    value = text.strip()
    return len(value) > 1 and value[0] == '"' and value[-1] == '"'
