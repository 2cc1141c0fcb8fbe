"""The page writes its figures' template once, in place of a small mark (render/page.py): the figure plotly.js draws
must be the one plotly writes when the figure names the template itself."""

import json

import plotly.graph_objects as go
import plotly.io as pio

from roseprof.render import page
from roseprof.render.figures import layout


def _figure():
    fig = go.Figure()
    fig.add_bar(y=["roseinfer.layer.mlp", "roseinfer.lm_head"], x=[1.5, 0.25], orientation="h", name="GPU")
    return layout(fig, "time per region <b>", note="a note")


def test_page_figure_is_plotlys_figure_with_the_template_named():
    marked = _figure()
    named = _figure().update_layout(template=page.TEMPLATE)
    written = json.loads(page._figure_json(marked))
    assert written == json.loads(pio.to_json(named, validate=False))
    assert (
        written["layout"]["template"]["layout"]["plot_bgcolor"] == "white"
    )  # plotly_white's, not the mark's
    assert page._MARK not in page._figure_json(_figure())


def test_a_figure_naming_no_template_is_written_as_plotly_writes_it():
    fig = go.Figure(layout={"template": None, "title": {"text": "t"}})
    assert page._figure_json(fig) == pio.to_json(fig, validate=False)
