"""The app's stacks: thin compositions of the constructs in ``infra/constructs``."""
