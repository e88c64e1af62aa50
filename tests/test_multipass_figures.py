"""The multi-pass track's picture of a phase timeline renders, and draws what the kernel does (not a hand-made copy of
it)."""

from __future__ import annotations

from utilities.multipass.figures import phase_timeline_picture


def test_the_phase_timeline_picture_renders_a_png(tmp_path):
    path = tmp_path / "phase_timeline.png"
    fig = phase_timeline_picture(path=path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert fig.axes, "the figure has no axes"
