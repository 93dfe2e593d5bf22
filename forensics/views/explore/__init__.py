"""The explorer: a slots × tokens heatmap of log norms, live in Jupyter (anywidget) and static in the report.

    >>> import forensics
    >>> ex = forensics.explore("sample_data/speculators_v1/data_0.pt")   # doctest: +SKIP
    >>> ex                                                              # doctest: +SKIP

Hover a cell: the token's text, position, id and every slot's norm (in the browser, no kernel round trip).
Click it: the token across every slot (norm, cosine to the previous slot and to the same id elsewhere) and,
with ``model=``, the logit lens top-5 of each slot. A folder lists its files with their verdicts;
←/→ move between tokens, ↑/↓ between files, +/− zoom. "SVG"/"PNG" export the view.

The state comes from :mod:`forensics.analysis.explore`; :mod:`.wire` packs it for the widget and for the
report (:func:`.wire.report_embed`); ``static/explore.js`` draws it in both.
"""

from __future__ import annotations

from typing import Any


def explore(x: Any, model: Any = None, layers: Any = None, tokenizer: Any = "auto", background: bool = True,
            input_ids: Any = None) -> Any:
    """One explorer widget for a capture path, a dataset folder, a ``Capture``, or ``[tokens, hidden]`` tensors.

    Args:
        x: what to explore (a folder lists every capture file under it).
        model: ``"default"`` (SmolLM2), a model path or a loaded model: the slot labels and verdicts are
            ``forensics.fingerprint(x, model=model)``'s (exact mode: ``Explorer.fingerprint()`` is that object),
            its tokenizer gives text to captures saved without one, and a click shows the logit lens.
        layers: the expected layer list, passed to ``forensics.fingerprint`` (the slot claims and verdicts).
        tokenizer: ``"auto"`` (the capture's own local tokenizer, else the model's), a folder (an HF model folder
            too: its tokenizer files), a tokenizer object, or None.
        background: fingerprint (verdicts, row findings) and load the model in a background thread, so the
            heatmap shows at once; ``Explorer.wait()`` waits for them.
        input_ids: the token ids of hidden states given in memory (their text needs ``tokenizer=`` or ``model=``).

    Returns:
        :class:`forensics.views.explore.widget.Explorer` (an ``anywidget.AnyWidget``).
    """
    from forensics.views.explore.widget import Explorer  # noqa: PLC0415 - anywidget (the notebooks extra), on call

    return Explorer(x, model=model, layers=layers, tokenizer=tokenizer, background=background, input_ids=input_ids)


__all__ = ["explore"]
