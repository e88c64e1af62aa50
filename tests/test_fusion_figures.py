"""The back-to-back track's picture of its dataflow renders, and draws what the kernel does (not a hand-made copy of
it)."""

from __future__ import annotations

from utilities.fusion.figures import b2b_dataflow_picture


def test_the_b2b_dataflow_picture_renders_a_png(tmp_path):
    path = tmp_path / "b2b_dataflow.png"
    fig = b2b_dataflow_picture(path=path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert fig.axes, "the figure has no axes"
