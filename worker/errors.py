"""Failures of the worker itself (not of the user's code): each ends the container with exit code 2."""


class WorkerError(Exception):
    """The worker cannot do its job; the message is one sentence for the job log."""


class ConfigError(WorkerError):
    """An environment variable is missing or malformed."""


class InvalidJobInput(WorkerError):
    """The input object is not one of the documented shapes."""


class StorageError(WorkerError):
    """S3 refused or failed a read or a write."""


class InputNotFound(StorageError):
    """The input object does not exist."""
