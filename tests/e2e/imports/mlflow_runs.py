"""Populates an MLflow tracking server for tests/e2e/imports (run by the bench environment's Python, which has MLflow).

`populate URI`: experiment "sft sweep" with a finished run (params, tags, two metric histories, an artifact), a
failed run, and a run left RUNNING; prints the running run's id. `finish RUN URI`: logs two more points to it and
ends it FINISHED.
"""

import os
import sys
import tempfile

from mlflow import MlflowClient

EXPERIMENT = "sft sweep"


def populate(client: MlflowClient) -> str:
    experiment = client.create_experiment(EXPERIMENT)
    done = client.create_run(experiment, run_name="lr-small", tags={"team": "nlp"})
    client.log_param(done.info.run_id, "lr", "0.001")
    client.log_param(done.info.run_id, "epochs", "3")
    for step in range(5):
        client.log_metric(
            done.info.run_id, "train loss", 1.0 / (step + 1), step=step, timestamp=1_700_000_000_000 + step
        )
    client.log_metric(done.info.run_id, "eval/acc", 0.5, step=4)
    notes = os.path.join(tempfile.mkdtemp(), "notes.txt")
    with open(notes, "w") as handle:
        handle.write("hello")
    client.log_artifact(done.info.run_id, notes, artifact_path="reports")
    client.set_terminated(done.info.run_id, "FINISHED")
    failed = client.create_run(experiment, run_name="lr-large")
    client.log_metric(failed.info.run_id, "train loss", 9.0, step=1)
    client.set_terminated(failed.info.run_id, "FAILED")
    running = client.create_run(experiment, run_name="still-going")
    for step in range(3):
        client.log_metric(running.info.run_id, "train loss", 2.0 - step / 10, step=step)
    return running.info.run_id


def finish(client: MlflowClient, run_id: str) -> None:
    for step in (3, 4):
        client.log_metric(run_id, "train loss", 2.0 - step / 10, step=step)
    client.set_terminated(run_id, "FINISHED")


if __name__ == "__main__":
    action, *rest, uri = sys.argv[1:]
    mlflow_client = MlflowClient(tracking_uri=uri)
    if action == "populate":
        print(populate(mlflow_client))
    else:
        finish(mlflow_client, rest[0])
