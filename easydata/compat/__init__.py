"""EasyData's object API (`easydel.data`) over this engine: sources, transforms, mixing, the loader,
and the fluent `Pipeline`. Thin objects over `easydata`'s readers, tokenizer, chat renderer, mixer
and schedule; see docs/migrating-from-easydata.md for the name-by-name map."""
