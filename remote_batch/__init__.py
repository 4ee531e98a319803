"""remote-batch's client package: the SDK, the CLI and the local stack (``remote_batch.local``)."""
