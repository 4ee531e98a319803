"""Does email hold at 10,000 accounts with SNS's default quotas? (issue 8, "Notifications at scale")

A shared topic with one filter policy per account's subscription stops at SNS's default of 200
filter policies per topic. The service gives each account's address a topic of its own
(``functions/adapters/sns.py``), with one subscription and no filter policy; SNS's default quota is
100,000 topics per AWS account. This benchmark makes N accounts' topics through the service's own
adapter (``SnsEmailSubscriptions.subscribe``: CreateTopic, then Subscribe) on moto (in-process),
then counts topics, subscriptions per topic and filter policies, and publishes one email through
``SnsNotifier`` to check it reaches that account's topic only.

moto's Subscribe scans every subscription for a duplicate, so the run takes longer than linear in N
(about 100 s for 10,000 on a shared 2-core machine); SNS does not.

Run by hand: ``python -m benchmarks.email_topics [--accounts 10000]``.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime

PREFIX = "arn:aws:sns:us-east-1:123456789012:remote-batch-bench-email-"


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark and print what it counted."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.email_topics", description=__doc__)
    parser.add_argument("--accounts", type=int, default=10_000, help="accounts that set an email")
    args = parser.parse_args(argv)

    from benchmarks.meter_scaling import _offline_environment

    _offline_environment()
    import boto3
    from moto import mock_aws
    from moto.sns.models import sns_backends

    from functions.adapters.sns import SnsEmailSubscriptions, SnsNotifier, email_topic_arn
    from functions.ports import OutgoingNotification

    with mock_aws():
        sns = boto3.client("sns", region_name="us-east-1")
        subscriptions = SnsEmailSubscriptions(sns, PREFIX)
        started = time.monotonic()
        for i in range(args.accounts):
            subscriptions.subscribe(f"acct{i:05d}", f"user{i:05d}@example.com")
        elapsed = time.monotonic() - started
        backend = sns_backends["123456789012"]["us-east-1"]
        topics = [arn for arn in backend.topics if arn.startswith(PREFIX)]
        per_topic = Counter(s.topic.arn for s in backend.subscriptions.values())
        subscribed = len(backend.subscriptions)
        filtered = sum(1 for s in backend.subscriptions.values() if s._filter_policy is not None)
        last, address = f"acct{args.accounts - 1:05d}", f"user{args.accounts - 1:05d}@example.com"
        notification = OutgoingNotification(
            "job-bench", last, "JobCompleted", "Email", address, "s", "m", datetime.now(UTC)
        )
        SnsNotifier(sns, PREFIX).send(notification)
        reached = [arn for arn, topic in backend.topics.items() if topic.sent_notifications]
    print(f"accounts: {args.accounts} (subscribed in {elapsed:.0f} s)")
    print(f"topics under remote-batch-bench-email-*: {len(topics)}")
    print(f"subscriptions: {subscribed}, at most {max(per_topic.values())} per topic")
    print(f"subscriptions with a filter policy: {filtered}")
    print(
        f"one email to {last} reached {len(reached)} topic(s), its own: "
        f"{reached == [email_topic_arn(PREFIX, last, address)]}"
    )


if __name__ == "__main__":
    main()
