"""``python -m remote_batch``: the ``remote-batch`` command line (the same as the console script)."""

from remote_batch.cli import main

main()
