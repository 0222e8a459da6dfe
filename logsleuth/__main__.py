"""`python -m logsleuth` runs the CLI."""

from .cli import main

main()
