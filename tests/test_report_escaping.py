"""Reports are safe to open: text from data, params and model output is shown, never rendered.

Markup and script go in at every place the retrospective takes a string from its inputs (ids,
prompts, completions, names, paths, values, messages); the HTML must show each one as its literal
text, hold no tag, link, emphasis or image that came from it, and read no file it names.
"""

import dataclasses
import html
import re
import unicodedata

import pytest

from rlvr.audit.diagnosis import diagnose_kl, ppo_cost
from rlvr.params.config import load_params
from rlvr.report.render import md_escape, md_image, md_table, to_html
from rlvr.report.retrospective import build_report
from tests.test_report import ROOT, T, _history

PAYLOAD = (
    "<script>alert(1)</script> <img src=x onerror=alert(1)> ![x](nope.png) "
    "[link](http://evil) *em* _em_ **strong** `code` | pipe | &amp; &lt; \\*x\\* "
    "<http://auto.link>\n# heading\n- item"
)


def evil(tag: str) -> str:
    """Markup and script, starting like a heading, tagged with where it went in."""
    return f"# {tag} {PAYLOAD}"


def shown(text: str) -> str:
    """How a page shows the text: newlines fold into spaces."""
    return " ".join(text.split("\n"))


def report_inputs(figures) -> tuple[dict, list[str]]:
    """build_report's inputs with an evil string at every place a string enters the report, and
    the texts the page must show."""
    params = dataclasses.asdict(load_params(ROOT / "params.yaml"))
    params["paths"].update(data_docs=evil("p1"), eval_runs=evil("p2"), timing=evil("p3"))
    params["report"]["window"] = evil("p4")
    params["model"]["name_or_path"] = evil("p5")

    def metrics(value, split):
        point = {"mean_reward": 0.5, "greedy_success": 0.5, "malformed_share": 0.0}
        ci = {"value": value, "ci_low": -0.1, "ci_high": 0.3}
        shares = {"mean_reward": 0.5, "greedy_success": 0.5, "pass@1": 0.5, "pass@2": 0.5}
        lost = {"id": evil(f"l{split}"), "tags": [evil(f"t{split}")], "prompt": evil(f"w{split}")}
        return {
            "prompts": 2,
            "step0": point,
            "final": point,
            "kl_final_vs_step0": evil("e1"),
            "delta_mean_reward": ci,
            "samples_per_prompt": 2,
            "delta_pass@1": ci,
            "delta_pass@2": ci,
            "crossing": evil(f"x{split}"),
            "losses": [],
            "pass_at_k": {p: {"1": 0.5, "2": 0.5} for p in ("step0", "final")},
            "slices": [
                {
                    "tag": evil(f"u{split}"),
                    "rows": 2,
                    "step0": shares,
                    "final": shares,
                    "delta_mean_reward": ci,
                    "weighed": True,
                    "regressed": True,
                    "reasons": [evil(f"r{split}")],
                }
            ],
            "solutions": {"lost": [lost], "new": [], "kept": 0, "lost_count": 1, "new_count": 0},
            "diversity": {
                p: {"distinct_correct_per_solved": 1.0, "distinct_share": 0.5, "entropy": None}
                for p in ("step0", "final")
            },
        }

    def row(i, delta, success):
        return {
            "split": "heldout",
            "id": evil(f"i{i}"),
            "prompt": evil(f"q{i}"),
            "step0_reward": 0.2,
            "final_reward": 0.2 + delta,
            "delta": delta,
            "step0_greedy": evil(f"g{i}"),
            "final_greedy": evil(f"h{i}"),
            "step0_success": success,
            "final_success": success,
        }

    def recipe(pooled):
        line = {
            "seed": 0,
            "samples": 2,
            "verdict": evil("y5"),
            "regressed_tags": [evil("y1")],
            "delta_mean_reward": pooled["delta_mean_reward"],
            "pass1_final": 0.5,
            "passn_final": 0.5,
            "validation_reward": 0.5,
        }
        slices = [
            {
                **pooled["slices"][0],
                "tag": evil("y1"),
                "regressed_seeds": 1,
                "delta_pass@2": pooled["delta_mean_reward"],
            }
        ]
        shares = {"mean_reward": 0.5, "pass@1": 0.5, "pass@2": 0.5}
        return {
            "seeds": [0, 7],
            "evaluated": [0],
            "failed": {7: evil("y2")},
            "seed_lines": [line],
            "pooled": {**pooled, "rows": 2, "slices": slices, "step0": shares, "final": shares},
            "verdict": "mixed",
            "verdict_line": "mixed: " + evil("y4"),
            "published_seed": 0,
            "published_reason": evil("y3"),
        }

    per_prompt = [
        row(0, 0.5, 0.5),
        row(1, -0.25, 0.5),
        row(2, 0.0, 0.0),
        {**row(3, 0.0, 1.0), "split": "train"},
    ]
    history = _history(lambda s: 0.3 + 0.5 * s / 200, lambda s: 0.1, steps=50)
    inputs = dict(
        evaluation={
            "verdict": evil("v1"),
            "verdict_split": "heldout",
            "verdict_line": evil("v2"),
            "train": metrics(0.1, 0),
            "heldout": metrics(0.2, 1),
        },
        per_prompt=per_prompt,
        history=history,
        diagnosis={**diagnose_kl(history, T), "label": evil("d1"), "advice": evil("d2")},
        hyperparameters=[
            (evil("k1"), evil("k2"), evil("k3")),
            ("rewards.format_pattern", r"^\s*\d+(\s*[-+*/]\s*\d+)+\s*$", "a regex"),
        ],
        smoke={
            "passed": True,
            "checks": [
                {"name": evil("s1"), "passed": False, "value": evil("s2"), "expected": evil("s3")}
            ],
        },
        step0={
            "mean_reward": evil("s4"),
            "prompts": evil("s5"),
            "samples_per_prompt": 8,
            "seed": evil("s6"),
        },
        validation={
            "passed": False,
            "problems": evil("a1"),
            "files": {
                "x": {
                    "path": evil("a2"),
                    "rows": evil("a3"),
                    "problems": evil("a4"),
                    "rules": {"id_unique": {"success": False}},
                }
            },
        },
        gate={"passed": True, "counts": {"passed": evil("c1"), "tests": evil("c2")}},
        cost=ppo_cost(1000, 16, 8),
        prov={
            "data": {evil("m1"): evil("m2")},
            "models": {evil("m3"): evil("m4")},
            "code": {evil("m5"): {"files": 3, "digest": "<b>*x*</b>0123456789abcdef"}},
            "versions": {evil("m6"): evil("m7")},
            "platform": evil("m8"),
        },
        params=params,
        images=figures,
        confidence=0.95,
        recipe=recipe(metrics(0.2, 1)),
        samples=[
            {
                "step": 1,
                "prompt": evil("z1"),
                "completions": [evil("z2"), "12`|3"],
                "rewards": [0.5, 0.25],
                "correct": [True, False],
            }
        ],
    )
    tags = [
        "y1",
        "y2",
        "y3",
        "y4",
        "y5",
        "p1",
        "p2",
        "p3",
        "p4",
        "e1",
        "v1",
        "d1",
        "d2",
        "k1",
        "k2",
        "k3",
        "s1",
        "s3",
        "s4",
        "s5",
        "s6",
        "a1",
        "a2",
        "a3",
        "a4",
        "c1",
        "c2",
        "m1",
        "m2",
        "m3",
        "m4",
        "m5",
        "m6",
        "m7",
        "m8",
        *[f"{x}{i}" for x in "iqgh" for i in (0, 1)],
        "i2",
        "v2",
        "x1",
        *[f"{x}{i}" for x in "ltwur" for i in (0, 1)],
        "z1",
        "z2",
    ]
    expected = [shown(evil(t)) for t in tags if t != "v1"] + [
        shown(evil("v1").capitalize()),
        shown(evil("s2")),  # a check's value, as plain_value shows a string
        "<b>*x*</b>012345",
        r"^\s*\d+(\s*[-+*/]\s*\d+)+\s*$",
        "12`|3 0.25 ✗",  # a completion with a code mark and a pipe, as written
    ]
    return inputs, expected


@pytest.fixture
def figures(tmp_path):
    """The report's own figures (two of the small curves), in a folder where nope.png does not
    exist."""
    from PIL import Image

    names = ("answer", "curves", "curve_reward", "curve_kl", "per_prompt", "pass_at_k", "seeds")
    for name in names:
        Image.new("RGB", (4, 4), "red").save(tmp_path / f"{name}.png")
    return {name: f"{name}.png" for name in names}


def visible_text(page: str) -> str:
    """The text a browser shows outside the params.yaml code block (which shows its own copy)."""
    body = re.sub(r"<pre>.*?</pre>", "", page.split("<body>", 1)[1], flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", body))


def test_markup_from_data_params_and_outputs_is_shown_as_text(tmp_path, figures):
    inputs, expected = report_inputs(figures)
    markdown = build_report(**inputs)
    page = to_html(markdown, tmp_path, images=figures)  # nope.png is not there: no read, no crash

    assert "<script" not in page.lower()
    images = re.findall(r"<img\b[^>]*>", page)  # the report's own figures, nothing else
    assert len(images) == len(figures) and all('src="data:image/png;base64,' in i for i in images)
    assert "<a " not in page and "href=" not in page
    assert not re.search(r"<(em|li|ul|ol|blockquote|hr)\b", page)
    assert "<strong>strong</strong>" not in page and "<code>code</code>" not in page
    assert page.count("<h1>") == 1  # the report's own title
    text = visible_text(page)
    missing = [e for e in expected if e not in text]
    assert not missing, f"not shown literally: {missing[:3]}"
    # the same inputs write the same bytes
    assert build_report(**report_inputs(figures)[0]) == markdown
    assert to_html(markdown, tmp_path, images=figures) == page


def test_only_the_pages_own_images_are_read(tmp_path, figures):
    from PIL import Image

    Image.new("RGB", (4, 4), "blue").save(tmp_path / "nope.png")  # would be inlined if named
    markdown = "\n\n".join(
        [
            md_image("curves", figures["curves"]),
            md_escape("![x](nope.png)"),
            "![own syntax, not an own figure](nope.png)",
        ]
    )
    page = to_html(markdown, tmp_path, images=figures)
    images = re.findall(r"<img\b[^>]*>", page)
    assert len(images) == 1 and 'alt="curves"' in images[0] and "nope.png" not in images[0]
    assert page.count("data:image/png;base64,") == 1 and "![x](nope.png)" in page


@pytest.mark.parametrize(
    "cell",
    [
        "<i>x</i>",
        "a | b",
        "*x*",
        "`x`",
        "[a](b)",
        "x\ny",
        "&amp;",
        "\\",
        "- x",
        "1. x",
        "# x",
        "_x_",
        "~~x~~",
        "<!-- x -->",
    ],
)
def test_a_table_cell_shows_exactly_its_text(tmp_path, cell):
    page = to_html("\n".join(md_table(["h"], [[cell], [0.5]])), tmp_path, images=())
    (td, number) = re.findall(r"<td>(.*?)</td>", page, flags=re.S)
    assert "<" not in td and html.unescape(td) == shown(cell) and number == "0.500"


@pytest.mark.parametrize(
    "text, seen",
    [
        ("~~~\nimport os", "~~~ import os"),  # a fence: would open a code block
        ("    indented", "    indented"),  # four spaces at a block's start: a code block
        ("\tx", "\tx"),
        ("invoice\u202egnp.exe", "invoice<U+202E>gnp.exe"),  # reads as invoiceexe.png
        ("a\u2066b\u2069c\u200dd", "a<U+2066>b<U+2069>c<U+200D>d"),
    ],
)
def test_a_paragraph_of_untrusted_text_shows_fences_indents_and_bidi_as_text(tmp_path, text, seen):
    page = to_html(md_escape(text), tmp_path, images=())
    body = page.split("<body>", 1)[1]
    assert "<pre" not in body and "<code" not in body
    assert not any(unicodedata.category(c) == "Cf" for c in body)
    assert seen in html.unescape(re.sub(r"<[^>]+>", "", body))


def test_the_report_says_which_kl_the_diagnosis_read(figures):
    from rlvr.core.metric_keys import FIRST_BATCH_KL

    inputs, _ = report_inputs(figures)
    assert "over the trained batch." in build_report(**inputs)
    history = [{**entry, FIRST_BATCH_KL: 0.05} for entry in inputs["history"]]
    inputs.update(history=history, diagnosis=diagnose_kl(history, T))
    assert (
        "end 0.050, over the first batch of each step, every group (dynamic sampling)."
        in build_report(**inputs)
    )


def test_the_report_opens_with_the_recipe_verdict_then_labels_the_seeds_own_as_one_runs(figures):
    inputs, _ = report_inputs(figures)
    inputs["evaluation"].update(
        verdict="mixed",
        verdict_line="mixed: improved overall "
        "(+0.200 [+0.100, +0.300]), regressed on sub (16 rows: x)",
    )
    inputs["recipe"].update(
        verdict="improved", verdict_line="improved: improved overall (+0.150 [+0.050, +0.250])"
    )
    lines = [line for line in build_report(**inputs).splitlines() if line]
    assert lines[0] == "# GRPO run: retrospective"
    # the answer in words first (rlvr/report/answer.py), its chart, then the recipe's line
    assert lines[1] == '<div id="answer" markdown="1">'
    assert lines[2].startswith("**Did training help?** ")
    end = lines.index("</div>")
    assert lines[end + 1].startswith("![held-out mean reward, pass@1 and pass@n")
    assert lines[end + 2] == (
        "**The recipe over 1 of 2 seeds: Improved**: improved overall "
        "(+0.150 \\[+0.050, +0.250\\])."
    )
    assert (
        "Seed 0, one run: **Mixed**: improved overall (+0.200 \\[+0.100, +0.300\\]), "
        "regressed on sub (16 rows: x)."
    ) in lines
    assert lines.index("## 0. The recipe over its seeds") < lines.index("## 1. Verdict of one run")


def test_without_a_recipe_the_report_opens_with_the_runs_verdict(figures):
    inputs, _ = report_inputs(figures)
    inputs["evaluation"].update(
        verdict="mixed",
        verdict_line="mixed: improved overall "
        "(+0.200 [+0.100, +0.300]), regressed on sub (16 rows: x)",
    )
    lines = [line for line in build_report(**{**inputs, "recipe": None}).splitlines() if line]
    assert lines[1] == (
        "**Mixed**: improved overall (+0.200 \\[+0.100, +0.300\\]), regressed on sub (16 rows: x)."
    )
