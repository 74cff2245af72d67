"""`python -m easydata` runs the CLI."""

from easydata.cli import console_main

console_main()
