"""The protocol on one page (docs/audit.md) says what the code does, and the report and the model
card say the same and point to it."""

import re

from rlvr.audit.slices import SliceRule
from rlvr.core.stats import ZERO_NOISE
from rlvr.params.config import load_params
from rlvr.report.model_card import PROTOCOL
from rlvr.report.retrospective import build_report
from tests.helpers import ROOT
from tests.test_model_card import _card, card_body
from tests.test_report_escaping import figures, report_inputs  # noqa: F401 (a fixture)

AUDIT = (ROOT / "docs" / "audit.md").read_text()


def test_the_page_states_the_protocol_with_the_codes_figures():
    for heading in (
        "## Which rows do what",
        "## One primary figure",
        "## Secondary figures, Holm-corrected",
        '## What "regressed" and "forgotten" mean',
        "## Float noise",
    ):
        assert heading in AUDIT
    params = load_params(ROOT / "params.yaml")
    assert f"`ZERO_NOISE` = {ZERO_NOISE:.0e}" in AUDIT
    assert f"`evaluate.n_resamples` is {params.evaluate.n_resamples:,}" in AUDIT
    report, rule = params.report, SliceRule()
    assert f"`report.slice_drop_from` ({report.slice_drop_from})" in AUDIT
    assert f"`report.slice_drop_to` ({report.slice_drop_to})" in AUDIT
    assert f"`report.min_slice_rows` ({report.min_slice_rows})" in AUDIT
    assert (rule.drop_from, rule.drop_to) == (report.slice_drop_from, report.slice_drop_to)
    assert f"`data.eval_path` (`{params.data.eval_path}`)" in AUDIT
    assert f"`data.val_path` (`{params.data.val_path}`)" in AUDIT
    seeds = ", ".join(map(str, params.audit.seeds))
    assert f"`audit.seeds` ({seeds})" in AUDIT


def test_the_report_and_the_card_say_the_protocol_and_name_its_page(figures):  # noqa: F811
    inputs, _ = report_inputs(figures)
    report = build_report(**inputs)
    assert "The protocol (`docs/audit.md` in the repository): " in report
    card = card_body(_card())
    assert "The protocol (docs/audit.md in the pipeline's repository): " in card
    words = re.sub(r"[`\\]", "", PROTOCOL)
    assert words in re.sub(r"[`\\]", "", card) and words in re.sub(r"[`\\]", "", report)
