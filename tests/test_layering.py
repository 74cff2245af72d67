"""Layering rules that keep the training side light: `easydata` imports neither Beam nor JAX."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["easydata", "easydata.reader", "easydata.config", "easydata.cli", "easydata.validate",
                                    "easydata.inspect", "easydata.formats", "easydata.sources", "easydata.stats",
                                    "easydata.token_files", "easydata.windows", "easydata.splits",
                                    "easydata.tokenizer_training", "easydata.reader.bin_reader"])
def test_core_modules_do_not_import_beam_or_jax(module):
    code = (f"import sys, {module}; "
            "bad = [m for m in ('apache_beam', 'jax') if m in sys.modules]; "
            "print(','.join(bad))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "", f"{module} imports {result.stdout.strip()}"
