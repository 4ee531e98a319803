"""The job container's entrypoint: fetch a job's input from S3, run it, upload what it produced.

Run as ``python -m worker``. This package ships alone in the job image: it imports nothing from
``functions`` or ``remote_batch``, and it is the only component that executes or unpickles user data.
It is two processes (``job_side`` says how they split the work): the supervisor (``entrypoint``,
``storage``, ``settings``, ``layout``, ``supervisor``, ``warm``; the service's Python, boto3) and the
job side (``job_side``, ``runner``, ``encoding``, ``errors``: the standard library and cloudpickle
only, in the job's own Python).

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
supervisor
    Starts the job side in the job's Python and reads what it recorded.
job_side
    The job side's program: runs the input, encodes the result, writes it for the supervisor.
entrypoint
    Wires them together and picks the exit code.
"""
