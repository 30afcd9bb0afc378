# Starling: one image for every role (docker-compose.yml, docs/deploy.md):
#   web      granian --interface wsgi ... feed.wsgi:application
#   worker   celery -A feed worker          beat   celery -A feed beat
#   fanout   python -m spark.stream.job         (the Spark driver)
#   spark    spark-class org.apache.spark.deploy.master.Master / ...worker.Worker
#            (the standalone cluster runs from the pyspark wheel installed here, so
#            its executors have the same Spark, the same Python and Starling's code)
#   migrate  python manage.py migrate; python manage.py ensure_topics
# No secret is baked in: settings come from the environment at run time.

# Debian 12 (bookworm): Debian 13 no longer packages OpenJDK 17, which Spark 4 runs on.
FROM python:3.11-slim-bookworm

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=feed.settings_production \
    STARLING_VAR_DIR=/var/lib/starling \
    STATIC_ROOT=/app/staticfiles

# Java for Spark (driver, master, workers, executors); procps for Spark's scripts.
# Slim images lack the man directory the JRE's post-install script writes to.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

# The dependencies first, read from pyproject.toml at the versions requirements.lock
# pins, so that a code change does not reinstall them (pyspark alone is ~450 MB).
COPY pyproject.toml requirements.lock /tmp/build/
RUN python -c "import tomllib; p = tomllib.load(open('/tmp/build/pyproject.toml', 'rb')); print('\n'.join(p['project']['dependencies']))" \
        > /tmp/build/requirements.txt \
    && pip install -c /tmp/build/requirements.lock -r /tmp/build/requirements.txt

# Then the project itself, from pyproject.toml (`pip install .`). Only the packages are
# copied: nothing else from the build context (.env, var/, .venv) can reach the image.
COPY README.md /tmp/build/README.md
COPY feed /tmp/build/feed
COPY fanout /tmp/build/fanout
COPY spark /tmp/build/spark
COPY load_tests /tmp/build/load_tests
RUN cd /tmp/build && pip install --no-deps . && cd / && rm -rf /tmp/build

# Spark's classes, parsed and verified once at build time, for every JVM the
# image's Python starts (spark/runtime/jvm_archive.py): a third off each Spark start.
# Optional: without it Spark starts, only slower.
RUN python -m spark.runtime.jvm_archive || echo "no JVM class archive: Spark starts without it"

WORKDIR /app
COPY manage.py /app/manage.py

# Static files (admin, API docs) are collected at build time for WhiteNoise. The
# production settings insist on a secret key; this one is random, used by this command
# only and never stored.
RUN DJANGO_SECRET_KEY="$(python -c 'import secrets; print(secrets.token_urlsafe(64))')" \
    DJANGO_ALLOWED_HOSTS=build.invalid \
    python manage.py collectstatic --noinput --verbosity 0

# An unprivileged user with a home (Hadoop's login code wants a named user). Its state
# directory (STARLING_VAR_DIR) exists in the image, so that a named volume mounted there
# starts out owned by it.
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/starling starling \
    && mkdir -p /var/lib/starling \
    && chown starling:starling /var/lib/starling
USER starling

EXPOSE 8000
CMD ["granian", "--interface", "wsgi", "--host", "0.0.0.0", "--port", "8000", "--workers", "2", \
     "--backpressure", "16", "--no-ws", "feed.wsgi:application"]
