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
    Turns an ``Outcome`` into its parts: the result's JSON document, its pickle, the messages, a
    PNG preview.
layout
    Packs those parts into the job's output objects: ``outcome.json``, plus an object of its own only
    for a part too big to inline or a picture of the result.
storage
    The job's S3 objects (the only module that talks to AWS).
entrypoint
    Wires them together and picks the exit code.
"""
