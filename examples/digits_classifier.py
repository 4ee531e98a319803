"""Train a scikit-learn classifier on the handwritten digits remotely; print its accuracy.

Run it next to a local stack (``make dev``) or after ``remote-batch login``::

    python examples/digits_classifier.py

The function below is pickled (by value: this file is not installed in the job's container) and runs on
a Basic2x8 machine; only its small result (the accuracy and a confusion matrix) comes back.
"""

from __future__ import annotations

from typing import Any

import remote_batch as rb


def train(test_size: float = 0.25, seed: int = 0) -> dict[str, Any]:
    """Fit an SVM on 1,797 8x8 digit images (scikit-learn's bundled copy of the UCI set) and score it on
    the held-out part."""
    from sklearn.datasets import load_digits
    from sklearn.metrics import confusion_matrix
    from sklearn.model_selection import train_test_split
    from sklearn.svm import SVC

    images, labels = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=test_size, random_state=seed, stratify=labels
    )
    model = SVC(gamma=0.001, C=10.0).fit(x_train, y_train)
    predicted = model.predict(x_test)
    return {
        "accuracy": float((predicted == y_test).mean()),
        "test_images": len(y_test),
        "confusion": confusion_matrix(y_test, predicted).tolist(),
    }


def main() -> None:
    job = rb.submit(train, name="digits-svm", machine_class="Basic2x8", time_constraint=600)
    print(f"submitted {job.id}")
    result = job.result()
    print(f"accuracy {result['accuracy']:.3f} on {result['test_images']} held-out digits")
    print(f"credits spent: {job.credits_spent}")


if __name__ == "__main__":
    main()
