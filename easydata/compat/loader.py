"""EasyData's `AsyncDataLoader` under its EasyData module path; it lives in `easydata.reader.async_loader`."""

from easydata.reader.async_loader import AsyncDataLoader, collate_rows

__all__ = ["AsyncDataLoader", "collate_rows"]
