"""The service's rules: pure Python, no AWS SDK, no clock reads (time is passed in)."""
