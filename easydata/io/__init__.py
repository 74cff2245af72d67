"""Inputs and files: file systems, reading input formats, output shard formats, token files, dead letters, the Hugging Face Hub."""
