"""Displays made in the guest (guest/host/_display.py), end to end: matplotlib figures
(seaborn, left open, `plt.show()`, a turn's value, with and without a preload image, the
`WASI_PYTHON_FIGURES` setting), a DataFrame turn's result display, `display()` of an object
with `_repr_mimebundle_`, and what the servers make of them (MCP image content, the HTTP
answers' fields). The PNGs are decoded on the host with Pillow."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from wasi_python import Session, run

FIGURES = "WASI_PYTHON_FIGURES"


def ok(done):
    assert done.exit_code == 0 and done.trapped is None, done.stderr.decode()[-3000:]
    return done


def png_size(display) -> tuple[int, int]:
    """The size of the PNG a display holds, decoded with Pillow (which checks it whole)."""
    image = Image.open(io.BytesIO(display.data["image/png"]))
    image.load()
    assert image.format == "PNG"
    return image.size


def test_a_seaborn_plot_left_open_is_a_png_of_its_size_times_the_dpi():
    code = (
        "import seaborn as sns, matplotlib.pyplot as plt\n"
        "plt.figure(figsize=(4, 3))\n"
        "sns.histplot([1, 2, 2, 3, 3, 3])\n"
        "print('drawn')\n"
    )
    done = ok(run(["-c", code]))
    assert done.stdout == b"drawn\n"  # the display is not printed
    [shown] = done.displays
    assert png_size(shown) == (400, 300)  # 4 x 3 in at 100 dpi, the default
    assert shown.data["text/plain"] == "<Figure size 400x300 with 1 Axes>"
    done = ok(run(["-c", code], env={FIGURES: "150"}))
    assert [png_size(d) for d in done.displays] == [(600, 450)]


def test_a_figure_never_shown_nor_closed_in_a_fresh_run_becomes_a_display():
    done = ok(run(["-c", "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('left open')"]))
    assert [png_size(d) for d in done.displays] == [(640, 480)]  # matplotlib's 6.4 x 4.8 in


def test_without_a_preload_image_pyplot_imported_by_the_program_shows_its_figures():
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\nprint(plt.get_fignums())"
    done = ok(run(["-c", code], preload=()))
    assert done.stdout == b"[]\n"  # show() closed it
    assert [png_size(d) for d in done.displays] == [(640, 480)]


def test_show_displays_each_open_figure_once_and_closes_them():
    code = (
        "import matplotlib.pyplot as plt\n"
        "plt.figure(figsize=(2, 2)); plt.plot([1, 2])\n"
        "plt.figure(figsize=(3, 2)); plt.plot([2, 1])\n"
        "plt.show()\n"
        "print('after', plt.get_fignums(), flush=True)\n"
        "fig = plt.figure(figsize=(1, 1))\n"
        "display(fig)\n"  # displayed, still open at the end: not shown twice
    )
    done = ok(run(["-c", code]))
    assert done.stdout == b"after []\n"
    assert [png_size(d) for d in done.displays] == [(200, 200), (300, 200), (100, 100)]


def test_figures_off_leaves_matplotlib_as_it_was():
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\nprint(len(plt.get_fignums()))"
    done = ok(run(["-c", code], env={FIGURES: "off"}))
    assert done.displays == ()
    assert done.stdout == b"1\n"  # still open: show() was matplotlib's own


def test_a_dataframe_turn_gives_html_and_text_as_its_result():
    with Session() as s:
        ok(s.run("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})"))
        done = ok(s.run("df"))
        assert done.stdout == b"   a  b\n0  1  x\n1  2  y\n"  # the echo, as before
        [result] = done.displays
        assert result.data["text/plain"] == "   a  b\n0  1  x\n1  2  y"
        assert "<table" in result.data["text/html"] and "<td>x</td>" in result.data["text/html"]
        assert result.metadata == {"wasi_python": {"result": True}}
        # A plain value is echoed only; `display` is a builtin in sessions.
        assert ok(s.run("41 + 1")).displays == ()
        done = ok(s.run("display(df.head(1))"))
        assert len(done.displays) == 1 and "wasi_python" not in done.displays[0].metadata


def test_a_figure_as_a_turns_value_is_shown_once():
    with Session() as s:
        done = ok(s.run("import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(2, 1))\nfig"))
        assert [png_size(d) for d in done.displays] == [(200, 100)]
        assert done.displays[0].metadata == {"wasi_python": {"result": True}}
        assert ok(s.run("len(plt.get_fignums())")).stdout == b"0\n"  # closed at the turn's end


def test_a_custom_object_with_repr_mimebundle():
    code = (
        "class Card:\n"
        "    def _repr_mimebundle_(self, include=None, exclude=None):\n"
        "        return {'text/markdown': '**card**', 'application/json': {'n': 1}}, {'text/markdown': {'k': 1}}\n"
        "    def _repr_html_(self):\n"
        "        return '<b>card</b>'\n"
        "    def __repr__(self):\n"
        "        return 'Card()'\n"
        "from host import display as shown\n"
        "shown(Card(), metadata={'tag': 'x'})\n"
        "display(Card(), exclude={'application/json'})\n"
    )
    done = ok(run(["-c", code]))
    first, second = done.displays
    assert dict(first.data) == {
        "text/markdown": "**card**", "application/json": {"n": 1}, "text/plain": "Card()", "text/html": "<b>card</b>",
    }
    assert dict(first.metadata) == {"text/markdown": {"k": 1}, "tag": "x"}
    assert set(second.data) == {"text/markdown", "text/plain", "text/html"}
    assert done.stdout == b""


# --- the servers ------------------------------------------------------------------------------


def test_mcp_returns_a_png_display_as_image_content():
    from serve_helpers import stdio_client

    client = stdio_client("--deadline-s", "60")
    try:
        r = client.call("run_python", {"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"})
        assert not r.is_error, r
        images = [c for c in r.content if c.type == "image"]
        assert [c.mime_type for c in images] == ["image/png"]
        import base64

        assert Image.open(io.BytesIO(base64.b64decode(images[0].data))).size == (640, 480)
        assert "1 display (image/png)" in r.content[0].text
        [whole] = r.structured_content["displays"]
        assert whole["data"]["image/png"] == images[0].data
        r = client.call("run_python", {"code": "import pandas as pd\ndisplay(pd.DataFrame({'a': [1]}))"})
        texts = [c.text for c in r.content if c.type == "text"]
        assert len(texts) == 2 and texts[1].startswith("[display text/html]\n<div>")
    finally:
        client.close()


def test_the_http_answers_carry_the_displays():
    import sandbox_fusion.models as sf

    from wasi_python.serve._http_wire import completed_json, fusion_response

    done = ok(run(["-c", "display({'text/markdown': '# hi', 'image/png': b'png'}, raw=True)"]))
    ours = completed_json(done)
    assert ours["displays"] == [{"data": {"text/markdown": "# hi", "image/png": "cG5n"}, "metadata": {}}]
    fusion = fusion_response(done, {})
    assert fusion["display"] == ours["displays"]
    assert sf.RunCodeResponse.parse_obj(fusion).status == "Success"  # SandboxFusion's client reads it as before
