"""Reading a `math` answer in the scoring process, without sympy: which text is the final answer,
and its value when it is a number written as one (exact, as a Fraction).

The rules (docs/data.md, "The math verifier's rules"):
- The answer is the last `<answer>` block, else the output; inside it, every `\\boxed{}` is a
  final answer (they must all score), else the whole text is one.
- A final answer is a value, not arithmetic left to do and not several values: `0.75`, `3/4`,
  `\\frac{3}{4}`, `75%`, `7.5e-1`, `7.5 \\times 10^{-1}` are values; `3*4`, `6/8` (a fraction not
  in lowest terms), `31 or 30`, `30, 31`, `T \\pm 1` are not. A row with `allow_expressions: true`
  takes arithmetic too (the worker reads it with sympy).
- Around the value: `$`, LaTeX spacing, `x = ` (the value after the last `=`), a sentence's lead
  (`The answer is`, `So, the answer is`), a trailing period, and unit words after it are not part
  of it; nor are the answer lines models are taught to write: markdown bold (`**Answer:** 12`,
  `**12**`), GSM8K's `#### 12` and the Minerva format's `I hope it is correct.`
- A relation other than `=` (`x < 12`, `x \\ne 12`, `x != 12`) states no value, nor does a value
  with an ellipsis (`0.333...`, `0.333\\ldots`: the digits go on).
- A percentage is its value over 100: `30%` is 0.3. A target written as a percentage (`95%`)
  also takes the bare count of percent (`95`): its question asks for a percent.
- Values compare exactly, unless the row states `rel_tol`, `abs_tol` or `sig_figs`.

Cost: finding the boxes is linear in the output; an answer longer than MAX_ANSWER_CHARS is not
read (no final answer is that long), so the rest stays within microseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal
from fractions import Fraction
from math import gcd

from rlvr.rewards.verifiers import extract_answer

MAX_ANSWER_CHARS = 1_000  # a final answer is short; a longer one earns nothing, unread
# e-notation exponents beyond this are not values anyone writes, and 10**N must stay cheap.
MAX_EXPONENT = 1_000
TOLERANCE_FIELDS = ("rel_tol", "abs_tol", "sig_figs")
MAX_SIG_FIGS = 30

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
# LaTeX that spells a value's layout, not its value.
_LAYOUT = [
    ("\\cdots", "..."),  # before \cdot: an ellipsis, not a product
    ("\\\\", ";"),
    ("\\left", ""),
    ("\\right", ""),
    ("\\displaystyle", ""),
    ("\\dfrac", "\\frac"),
    ("\\tfrac", "\\frac"),
    ("\\!", ""),
    ("\\,", ""),
    ("\\;", " "),
    ("\\:", " "),
    ("\\ ", " "),
    ("{,}", ","),
    ("\\%", "%"),
    ("\\times", "*"),
    ("\\cdot", "*"),
    ("×", "*"),
    ("·", "*"),
    ("−", "-"),
    ("\\$", ""),
    ("$", ""),
    ("\\(", ""),
    ("\\)", ""),
    ("\\[", ""),
    ("\\]", ""),
    ("\\approx", "="),
    ("≈", "="),
    ("~", " "),
]
# Relations, negated ones included (`x \ne 12`, `x != 12`, `x \not= 12` say what x is not).
_RELATIONS = ("<", ">", "\\le", "\\ge", "\\ne", "\\not", "\\nl", "\\ng", "!=", "≤", "≥", "≠")
# An ellipsis: the digits or the terms go on (`0.333...` is 1/3), so the value is not written out.
ELLIPSIS = re.compile(r"\.\.\.|…|\\[lv]?dots")  # after the layout, which spells `\cdots` `...`
# An approximation (`\pi \approx 3.14`) is no target: the exact value is, with a stated tolerance.
APPROXIMATION = re.compile(r"\\approx|≈|\\simeq|\\sim\b|≃")
# The answer lines models are taught to write: markdown bold (`**Answer:** 12`), GSM8K's `#### 12`
# and the Minerva format's closing sentence (`... is $12$. I hope it is correct.`).
_BOLD = re.compile(r"\*\*(?=[A-Za-z])|(?<=[A-Za-z:])\*\*")
_HASHES = re.compile(r"^#{4}\s*")
_CLOSING = re.compile(r"\.?\s*I hope it is correct\.?$", re.IGNORECASE)
# Words after a value that change or withdraw it, so that no unit is: a magnitude, a power or
# fraction word, an operation, a sign, a negation or retraction, a comparison (docs/data.md).
# Any other words after a value are its unit (`12 apples`, `12 km per hour`, `300 K`).
NOT_UNITS = frozenset(
    """hundred hundreds thousand thousands million millions billion billions trillion trillions
    dozen dozens gross score lakh crore k bn mn
    squared cubed power half halves third thirds quarter quarters fourth fourths fifth fifths
    sixth sixths seventh sevenths eighth eighths ninth ninths tenth tenths
    times over plus minus pi negative recurring repeating
    not no wrong incorrect false is isn't was are maybe perhaps or and
    more than less fewer above below under beyond least most approximately approx about roughly
    around nearly almost ish""".split()
)
_PERCENT_WORDS = re.compile(r"\s*\b(?:percent|per ?cent|pct)\.?$", re.IGNORECASE)
_UNIT_TEXT = re.compile(r"\s*\\(?:text|mathrm|mbox|textrm)\s*\{\s*[A-Za-z][A-Za-z .]*\}\s*$")
_UNIT_WORDS = re.compile(r"\s+[A-Za-z]+(?: [A-Za-z]+)*\s*$")
_DEGREES = re.compile(r"\s*(?:\^\s*\{?\s*\\circ\s*\}?|°)\s*$")
# What may stand between values of one answer: a comma (not a thousands separator), a semicolon,
# plus-or-minus, "or"/"and", LaTeX's line and column breaks and wide spaces.
_SEPARATORS = re.compile(
    r"(?<!\d),|,(?!\d{3}(?!\d))|;|\\pm|\\mp|±|∓|\bor\b|\band\b|\\\\|&|"
    r"\\q?quad"
)

# thousands separated by commas (`8,860`) or by spaces, as SI writes them (`8 860`, `1 234 567`)
_INT = r"\d{1,3}(?:,\d{3})+|\d{1,3}(?:[ ]\d{3})+|\d+"  # [ ]: _LITERAL is verbose
_NUMBER = rf"(?:(?:{_INT})(?:\.\d*)?|\.\d+)"
_LITERAL = re.compile(
    rf"""\(?\s*(?P<sign>[+-]?)\s*(?:
        (?P<number>{_NUMBER})
            (?:[eE](?P<e>[+-]?\d{{1,6}})
              |\s*\*\s*10\s*\^\s*(?:\{{\s*(?P<e10>[+-]?\d{{1,6}})\s*\}}|(?P<e10d>[+-]?\d)))?
            \s*(?P<percent>%)?
      | \\frac\s*(?:\{{\s*(?P<fsign>[+-]?)\s*(?P<fn>\d+)\s*\}}\s*\{{\s*(?P<fd>\d+)\s*\}}
                   |(?P<fn1>\d)\s*(?P<fd1>\d))
      | (?P<n>\d+)\s*/\s*(?P<d>\d+)
    )\s*\)?""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class Tolerance:
    """How close an answer must be to its target: exact when every field is None. `rel_tol` and
    `abs_tol` as math.isclose (either suffices); `sig_figs`: both rounded to that many
    significant figures, half away from zero, are equal."""

    rel_tol: Fraction | None = None
    abs_tol: Fraction | None = None
    sig_figs: int | None = None

    @classmethod
    def of(cls, verifier) -> Tolerance:
        """The tolerance a verifier states (its fields checked by the contract)."""

        def exact(name):
            value = verifier.get(name)
            return None if value is None else Fraction(str(value))

        return cls(exact("rel_tol"), exact("abs_tol"), verifier.get("sig_figs"))

    @property
    def exact(self) -> bool:
        return self.rel_tol is None and self.abs_tol is None and self.sig_figs is None

    def close(self, answer: Fraction, target: Fraction) -> bool:
        """Is the answer's value close enough to the target's?

        >>> Tolerance(sig_figs=3).close(Fraction(852000), Fraction("851737.58055369"))
        True
        >>> Tolerance(sig_figs=3).close(Fraction(853000), Fraction("851737.58055369"))
        False
        """
        if self.exact:
            return answer == target
        if self.sig_figs is not None:
            return round_sig(answer, self.sig_figs) == round_sig(target, self.sig_figs)
        bound = max(  # math.isclose: relative to the larger of the two
            self.rel_tol * max(abs(answer), abs(target)) if self.rel_tol is not None else 0,
            self.abs_tol if self.abs_tol is not None else 0,
        )
        return abs(answer - target) <= bound

    def as_json(self) -> dict:
        return {
            "rel_tol": None if self.rel_tol is None else str(self.rel_tol),
            "abs_tol": None if self.abs_tol is None else str(self.abs_tol),
            "sig_figs": self.sig_figs,
        }


def round_sig(value: Fraction, figures: int) -> Decimal:
    """`value` to `figures` significant figures, half away from zero (exact division, then one
    rounding: decimal's division is correctly rounded).

    >>> round_sig(Fraction(851737), 3), round_sig(Fraction(-5, 2), 1), round_sig(Fraction(0), 2)
    (Decimal('8.52E+5'), Decimal('-3'), Decimal('0'))
    """
    context = Context(prec=figures, rounding=ROUND_HALF_UP, Emax=10**6, Emin=-(10**6))
    return context.divide(Decimal(value.numerator), Decimal(value.denominator))


@dataclass(frozen=True)
class Literal:
    """A number as written: its exact value, and whether it was written as a percentage."""

    value: Fraction
    percent: bool = False


def read_literal(text: str, reduced: bool = True) -> Literal | None:
    """The value of `text` when it is one number written as one (see the module's rules), else
    None. `reduced`: a fraction must be in lowest terms (answers; a target need not be).

    >>> read_literal("1.2538491439703905e+18").value == 1253849143970390500
    True
    >>> read_literal("-\\\\frac{3}{4}").value, read_literal("75%"), read_literal("3*4")
    (Fraction(-3, 4), Literal(value=Fraction(3, 4), percent=True), None)
    >>> read_literal("6/8"), read_literal("6/8", reduced=False).value
    (None, Fraction(3, 4))
    """
    match = _LITERAL.fullmatch(text.strip())
    if match is None or (text.strip().startswith("(") != text.strip().endswith(")")):
        return None
    g = match.groupdict()
    sign = (-1 if g["sign"] == "-" else 1) * (-1 if g["fsign"] == "-" else 1)
    if g["number"] is not None:
        exponent = int(g["e"] or g["e10"] or g["e10d"] or 0)
        if abs(exponent) > MAX_EXPONENT:
            return None
        digits = g["number"].replace(",", "").replace(" ", "")
        value = Fraction(Decimal(digits)) * Fraction(10) ** exponent
        if g["percent"]:
            value /= 100
        return Literal(sign * value, bool(g["percent"]))
    numerator, denominator = (
        int(g["fn"] or g["fn1"] or g["n"]),
        int(g["fd"] or g["fd1"] or g["d"]),
    )
    if denominator == 0 or (reduced and (denominator == 1 or gcd(numerator, denominator) != 1)):
        return None
    return Literal(sign * Fraction(numerator, denominator))


def boxes(text: str) -> list[str] | None:
    """The contents of every `\\boxed{}` (or `\\fbox{}`) in `text`; None when a box never closes.

    >>> boxes("so \\\\boxed{\\\\frac{1}{2}} or \\\\boxed{3}"), boxes("no box"), boxes("\\\\boxed{1")
    (['\\\\frac{1}{2}', '3'], [], None)
    """
    found, position = [], 0
    while (match := _BOX.search(text, position)) is not None:
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                found.append(text[start:i])
                position = i + 1  # a box inside this one is part of its text: linear overall
                break
        else:
            return None
    return found


def final_answers(output: str) -> list[str]:
    """The final answers an output states, each cleaned to the value's text (see the module's
    rules); [] when it states none, or one is longer than MAX_ANSWER_CHARS.

    >>> final_answers("I get <answer>The answer is $x = 7.5 \\\\times 10^{-1}$.</answer>")
    ['7.5 * 10^{-1}']
    >>> final_answers("4*3 is \\\\boxed{12} and \\\\boxed{12 \\\\text{ apples}}")
    ['12', '12']
    """
    text = extract_answer(output)
    found = boxes(text)
    if found is None or any(len(answer) > MAX_ANSWER_CHARS for answer in found or [text]):
        return []
    cleaned = [clean(answer) for answer in found or [text]]
    return cleaned if all(cleaned) else []


def clean(text: str) -> str:
    """The value's text: layout, `x = `, a sentence's lead, units and a final period removed."""
    for old, new in _LAYOUT:
        text = text.replace(old, new)
    text = _unwrapped(" ".join(text.split()))
    text = _HASHES.sub("", _BOLD.sub("", _CLOSING.sub("", text)))
    if any(relation in text for relation in _RELATIONS):
        return text  # an inequality is not a value: left whole, it reads as none
    text = text.rpartition("=")[2].strip()
    for lead in (":", " is "):
        head, found, tail = text.rpartition(lead)
        if found and head and all(c.isascii() and (c.isalpha() or c in " ',") for c in head):
            text = tail.strip()
    if ELLIPSIS.search(text):
        return ""  # not a value written out: no answer (before the final period goes with it)
    text = _unwrapped(text.rstrip(" ."))
    if len(text) > 4 and text.startswith("**") and text.endswith("**"):
        text = text[2:-2].strip()  # a value in bold
    text = _PERCENT_WORDS.sub("%", text)  # `12 percent` is `12%`
    for unit in (_UNIT_TEXT, _DEGREES, _UNIT_WORDS):
        match = unit.search(text)
        if match is None:
            continue
        words = re.findall(r"[A-Za-z']+", match.group(0))  # a one-letter word keeps its case:
        if NOT_UNITS.intersection(
            w if len(w) == 1 else w.lower() for w in words
        ):  # 300 K is kelvin
            return ""  # `12 thousand`, `12 is wrong`, `12\text{k}`: not the value 12
        text = text[: match.start()]
    return text.rstrip(" .")


def _unwrapped(text: str) -> str:
    """`text` without the grouping braces or boxes around all of it (`{12}`, `\\boxed{\\boxed{12}}`,
    `{{{528/613}}}` are their content); a brace that closes early (`{1}{2}`) stays."""
    while True:
        box = _BOX.match(text)
        start = box.end() if box else 1 if text.startswith("{") else None
        if start is None or not text.endswith("}"):
            return text
        depth = 1
        for i in range(start, len(text) - 1):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return text  # the opening brace closes before the end: not one group
        text = text[start:-1].strip()


def several_values(text: str) -> bool:
    """Does the answer hold more than one value (a list, a choice, plus-or-minus)?

    >>> several_values("31 or 30"), several_values("30, 31"), several_values("1,000")
    (True, True, False)
    """
    return _SEPARATORS.search(text) is not None
