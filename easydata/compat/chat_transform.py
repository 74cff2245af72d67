"""EasyData's `ChatTemplateTransform`, under its EasyData module path; it lives in
`easydata.core.chat_transform` (the protocols' `apply_chat_template` builds it)."""

from easydata.core.chat_transform import ChatTemplateTransform, as_tokenizer_handle

__all__ = ["ChatTemplateTransform", "as_tokenizer_handle"]
