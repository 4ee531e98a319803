"""Issue 2 acceptance: jobs of each kind run on the local stack, are charged and notify."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

from tests.e2e.conftest import Client, LocalStackProcess, wait_for, worker_processes

DIGITS = """
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X / 16.0, y, test_size=0.25, random_state=0)
model = LogisticRegression(max_iter=2000).fit(X_train, y_train)
accuracy = float(model.score(X_test, y_test))
print(f"digits accuracy {accuracy:.3f}")
accuracy
"""


def _email_events(stack: LocalStackProcess, job_id: str) -> list[str]:
    return sorted(line["event"] for line in stack.outbox(job_id) if line["method"] == "Email")


def test_code_job_succeeds_charges_one_credit_and_notifies(stack: LocalStackProcess, dev: Client) -> None:
    # Given the dev account's balance
    before = dev.balance()

    # When it submits 2 + 2
    job = dev.submit({"code": "2 + 2"})

    # Then the job succeeds within 10 s with result 4, costing exactly the 60 s minimum: 1 credit
    done = dev.wait_status(job["jobId"], timeout=10)
    assert done["status"] == "Succeeded", done
    result = dev.get(f"/jobs/{job['jobId']}/result")
    assert result.status_code == 200, result.text
    assert result.json()["result"] == 4
    assert Decimal(str(done["creditsSpent"])) == Decimal("1")
    assert dev.balance() == before - Decimal("1")
    # and the outbox shows one JobStarting and one JobCompleted email
    wait_for(lambda: len(_email_events(stack, job["jobId"])) >= 2, 5, "two outbox lines")
    assert _email_events(stack, job["jobId"]) == ["JobCompleted", "JobStarting"]


def test_scikit_learn_digits_classifier(dev: Client) -> None:
    job = dev.submit({"code": DIGITS})

    done = dev.wait_status(job["jobId"], timeout=90)

    assert done["status"] == "Succeeded", done
    result = dev.get(f"/jobs/{job['jobId']}/result").json()
    assert isinstance(result["result"], float)
    assert result["result"] > 0.9
    log = dev.get(f"/jobs/{job['jobId']}/log")
    assert log.status_code == 200, log.text
    assert any("digits accuracy" in event["message"] for event in log.json()["events"])


def test_command_job_log_in_every_format(dev: Client) -> None:
    job = dev.submit({"command": ["python", "-c", "print('hello')"]})

    done = dev.wait_status(job["jobId"], timeout=30)

    assert done["status"] == "Succeeded", done
    assert done["exitCode"] == 0
    as_json = dev.get(f"/jobs/{job['jobId']}/log?format=json")
    assert as_json.status_code == 200
    assert as_json.json()["jobId"] == job["jobId"]
    assert any(event["message"] == "hello" for event in as_json.json()["events"])
    as_text = dev.get(f"/jobs/{job['jobId']}/log?format=text")
    assert as_text.status_code == 200
    assert as_text.headers["Content-Type"].startswith("text/plain")
    assert "hello" in as_text.text.splitlines()
    as_csv = dev.get(f"/jobs/{job['jobId']}/log?format=csv")
    assert as_csv.status_code == 200
    assert as_csv.headers["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(as_csv.text)))
    assert rows[0] == ["timestamp", "message"]
    assert any(row[1] == "hello" for row in rows[1:])


def test_failing_code_is_terminated_with_its_error(dev: Client) -> None:
    job = dev.submit({"code": "1/0"})

    done = dev.wait_status(job["jobId"], timeout=30)

    assert done["status"] == "Terminated", done
    assert "ZeroDivisionError" in done["statusReason"]
    assert done["exitCode"] not in (None, 0)
    result = dev.get(f"/jobs/{job['jobId']}/result")
    assert result.status_code == 200, result.text
    body = result.json()
    assert body["result"] is None
    assert any("ZeroDivisionError" in message for message in body["messages"])


def test_abort_running_job(dev: Client) -> None:
    before = dev.balance()
    job = dev.submit({"code": "import time\ntime.sleep(300)"})
    dev.wait_status(job["jobId"], ("Running",), timeout=30)
    wait_for(lambda: worker_processes(job["jobId"]), 10, "the job's worker process")

    aborted = dev.post(f"/jobs/{job['jobId']}/abort")

    assert aborted.status_code == 202, aborted.text
    done = dev.wait_status(job["jobId"], timeout=30)
    assert done["status"] == "Terminated"
    assert done["statusReason"] == "Aborted by user"
    wait_for(lambda: not worker_processes(job["jobId"]), 10, "the job's worker to be gone")
    # It ran well under the 60 s minimum: charged exactly 1 credit, and the balance moved by that.
    assert Decimal(str(done["creditsSpent"])) == Decimal("1")
    assert dev.balance() == before - Decimal("1")
