"""Train a model in an environment of your own packages, keep it as an output, then predict with it in a
second job in the same environment.

Run it next to a local stack (``make dev``) or after ``remote-batch login``::

    python examples/environment_model.py

This is the AWS Batch case of choosing the tools and libraries a job runs with:

1. An environment ``digits-sklearn`` holds scikit-learn, pinned (the model is saved and loaded by the
   same version), on this interpreter's Python, so that the functions below, pickled here, load there.
   It is built once (its build log shows as it comes); run the example again and the same spec is
   found, nothing is rebuilt.
2. ``train`` runs in it: it fits a classifier on scikit-learn's bundled handwritten digits and saves the
   model with joblib under ``$REMOTE_BATCH_OUTPUT_DIR``, which makes ``model.joblib`` an output of the
   job, kept 14 days.
3. ``predict`` runs in the same environment with the downloaded model file, on digits it did not see.

The same from the CLI: ``remote-batch env create digits-sklearn -r requirements.txt --wait``, then
``remote-batch submit --env digits-sklearn train.py``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import remote_batch as rb

ENVIRONMENT = "digits-sklearn"
REQUIREMENTS = ["scikit-learn==1.9.1"]
#: Digits the model is not trained on (train() keeps them out), predicted by the second job.
HELD_OUT = list(range(1700, 1797))


def train(held_out: list[int]) -> dict[str, Any]:
    """Fit an SVM on the digits but ``held_out``; save it as the output ``model.joblib``."""
    import os

    import joblib
    import numpy as np
    import sklearn
    from sklearn.datasets import load_digits
    from sklearn.svm import SVC

    images, labels = load_digits(return_X_y=True)
    keep = np.setdiff1d(np.arange(len(labels)), held_out)
    model = SVC(gamma=0.001, C=10.0).fit(images[keep], labels[keep])
    joblib.dump(model, Path(os.environ["REMOTE_BATCH_OUTPUT_DIR"]) / "model.joblib")
    return {"sklearn": sklearn.__version__, "trained_on": len(keep)}


def predict(model_file: bytes, indices: list[int]) -> dict[str, Any]:
    """Load the model of ``model_file`` and predict the digits at ``indices``."""
    import io

    import joblib
    import sklearn
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    model = joblib.load(io.BytesIO(model_file))
    predicted = model.predict(images[indices])
    return {
        "sklearn": sklearn.__version__,
        "accuracy": float((predicted == labels[indices]).mean()),
        "first": predicted[:10].tolist(),
    }


def main() -> None:
    environment = rb.Environment(ENVIRONMENT, requirements=REQUIREMENTS).create()
    print(f"environment {environment.name}: {'created' if environment.created else 'found'}")
    environment.wait()  # the build log on stderr as it comes; raises EnvironmentFailed with its reason
    print(f"ready: {len(environment.packages)} packages, build {environment.hash}")

    trained = rb.submit(train, HELD_OUT, name="digits-train", environment=environment, time_constraint=600)
    summary = trained.result()
    print(f"trained with scikit-learn {summary['sklearn']} on {summary['trained_on']} digits")
    print(f"outputs: {', '.join(f'{o.name} ({o.size} bytes)' for o in trained.outputs)}")
    with tempfile.TemporaryDirectory() as folder:
        (model_path,) = trained.download(folder)
        model_file = model_path.read_bytes()

    predicting = rb.submit(
        predict, model_file, HELD_OUT, name="digits-predict", environment=environment, time_constraint=600
    )
    prediction = predicting.result()
    print(f"predicted with scikit-learn {prediction['sklearn']}: first digits {prediction['first']}")
    print(f"accuracy {prediction['accuracy']:.3f} on {len(HELD_OUT)} held-out digits")
    print(f"credits spent: {trained.credits_spent + predicting.credits_spent}")


if __name__ == "__main__":
    main()
