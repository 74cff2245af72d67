"""Text to tokens: tokenizer loading and encoding, chat templates, cutting into windows, tokenizer training."""
