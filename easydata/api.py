"""The Python API: `Pipeline` (EasyData's fluent builder, plus `.run()` for a whole config),
`create_pipeline` and `tokenize_and_save`; they live in `easydata.compat.pipeline`."""

from easydata.compat.pipeline import Pipeline, create_pipeline, tokenize_and_save

__all__ = ["Pipeline", "create_pipeline", "tokenize_and_save"]
