"""What ``spark-submit`` runs: Starling's fanout job or its rebuild, on the
cluster ``spark-submit`` was pointed at.

    spark-submit [spark options] submit.py job [the options of python -m spark.stream.job]
    spark-submit [spark options] submit.py rebuild [the options of manage.py rebuild_timelines]

``spark-submit`` needs a file, and the modules cannot be given directly:
run as a file, ``spark/stream/job.py`` puts its own directory first on
``sys.path``, where ``spark/stream/operator.py`` hides the standard library's
``operator``. This file only dispatches. The driver (the machine running
``spark-submit``) needs Starling installed (``spark.pyspark.driver.python``
names its interpreter); the executors get it from the packed environment
(``deploy/spark/package.py``, docs/deploy.md "Running on a Spark cluster").

``--master``, ``--conf`` and the other spark-submit options win over
Starling's Spark defaults (spark/runtime/session.py); the job's and the rebuild's
own ``--master`` and ``SPARK_MASTER`` are not used under spark-submit.
The rebuild runs as ``manage.py rebuild_timelines --standalone`` (its
verification samples the database), so ``DATABASE_URL`` and
``DJANGO_SETTINGS_MODULE`` (default ``feed.settings``) apply to it: a
rebuild submitted to the cluster runs as an application of its own there,
rather than asking the running job for it as ``manage.py rebuild_timelines``
does by default.
"""

from __future__ import annotations

import os
import sys

USAGE = "usage: spark-submit [spark options] submit.py {job,rebuild} [options]"


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("job", "rebuild"):
        print(USAGE, file=sys.stderr)
        return 2
    command, args = argv[0], argv[1:]
    # Spark runs the executors' interpreter on the driver too (to plan the Kafka
    # data source), resolved in this directory: without it the job fails later
    # with a bare "Cannot run program".
    python = os.environ.get("PYSPARK_PYTHON", "")
    if python and not os.path.isabs(python) and not os.path.exists(python):
        print(
            f"{python} (spark.pyspark.python) is not in {os.getcwd()}: run spark-submit "
            "in the package's directory, which holds the unpacked environment",
            file=sys.stderr,
        )
        return 2
    if command == "job":
        from spark.stream.job import main as job

        return job(args)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "feed.settings")
    from django.core.management import execute_from_command_line

    # Exits with the command's status (1 when the rebuild failed).
    execute_from_command_line(["manage.py", "rebuild_timelines", "--standalone", *args])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
