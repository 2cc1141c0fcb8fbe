"""The page writes its figures' template once, in place of a small mark (render/page.py): the figure plotly.js draws
must be the one plotly writes when the figure names the template itself, and the page must take that path (a
plotly that wrote the mark otherwise would fall back to naming the template in every figure: correct, but slow)."""

import json

import plotly.io as pio

from roseprof.render import page
from roseprof.render.figures import figure, layout


def _figure():
    fig = figure()
    fig.add_bar(y=["roseinfer.layer.mlp", "roseinfer.lm_head"], x=[1.5, 0.25], orientation="h", name="GPU")
    return layout(fig, "time per region <b>", note="a note")


def test_page_figure_is_plotlys_figure_with_the_template_named():
    marked = _figure()
    # the fast path: the mark replaced in the text
    assert page._MARK_JSON in pio.to_json(marked, validate=False)
    named = _figure().update_layout(template=page.TEMPLATE)
    written = json.loads(page._figure_json(marked))
    assert written == json.loads(pio.to_json(named, validate=False))
    # plotly_white's, not the mark's
    assert written["layout"]["template"]["layout"]["plot_bgcolor"] == "white"
    assert marked.layout.template == page.template_mark()  # the figure itself was not renamed


def test_a_figure_naming_no_template_is_written_as_plotly_writes_it():
    import plotly.graph_objects as go

    fig = go.Figure(layout={"template": None, "title": {"text": "t"}})
    assert page._figure_json(fig) == pio.to_json(fig, validate=False)
