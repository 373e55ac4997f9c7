"""pandas tables for the notebook that show every cell in full (pandas cuts cells at 50 characters by default,
which cut advice, file names and split rules off). pandas is imported here only when a table is built: core and env
need only the standard library."""
from __future__ import annotations

_FRAME_CLASS: list = []


def _frame_class():
    """A DataFrame whose notebook and text views never truncate a cell (built once, on first use)."""
    if not _FRAME_CLASS:
        import pandas as pd

        class FullTextFrame(pd.DataFrame):
            @property
            def _constructor(self):
                return FullTextFrame

            def _repr_html_(self):
                with pd.option_context("display.max_colwidth", None):
                    return super()._repr_html_()

            def __repr__(self):
                with pd.option_context("display.max_colwidth", None, "display.width", 200):
                    return super().__repr__()

        _FRAME_CLASS.append(FullTextFrame)
    return _FRAME_CLASS[0]


def full_text_frame(rows: list[dict], columns: list[str] | None = None):
    """A pandas DataFrame of ``rows`` that shows every cell whole in a notebook."""
    return _frame_class()(rows, columns=columns)
