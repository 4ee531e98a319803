"""The local stack: the whole service on one machine, with no AWS account (``make dev``).

moto (in-process server) stands in for DynamoDB, S3, SNS and CloudWatch Logs; the three Lambda
handlers run in-process behind an HTTP server that plays API Gateway; a local executor runs each job's
worker in a subprocess and emits ``Batch Job State Change`` events through an in-process bus.
Start it with ``python -m remote_batch_local`` (see ``__main__``).
"""
