"""The job container's entrypoint: fetch a job's input from S3, run it, upload what it produced.

Run as ``python -m worker``. This package ships alone in the job image: it imports nothing from
``functions`` or ``remote_batch``, and it is the only component that executes or unpickles user data.

Modules
-------
settings
    The environment the container is started with.
runner
    Runs ``code``, ``command`` or ``pickle`` input and returns an ``Outcome`` (no S3).
encoding
    Turns an ``Outcome`` into the bytes of ``result.json``, ``result.pickle``, ``messages.json`` and
    ``preview.png``.
storage
    The job's S3 objects (the only module that talks to AWS).
entrypoint
    Wires them together and picks the exit code.
"""
