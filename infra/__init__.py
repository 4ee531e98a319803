"""The remote-batch CDK app: stacks compose one construct per concern (see ``infra/app.py``)."""
