"""``python -m verticalfs`` is the ``verticalfs`` command."""

from verticalfs.cli import main

main()
